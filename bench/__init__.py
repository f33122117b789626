"""`palkit bench`: measuring bundles, separate models and peers on this machine."""
