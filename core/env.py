"""The environment variables palkit reads, each named once (no imports: the torch-free runtime
reads them too)."""

DATA_DIR_ENV = "PALKIT_DATA_DIR"     # the data folder, after --data-dir
TRUST_KEY_ENV = "PALKIT_TRUST_KEY"   # the public key bundle loaders require (runtime/signing.py)
