"""`--pal-layers`: every spelling means the layers it says, end to end through both runtimes."""
from __future__ import annotations

import numpy as np
import pytest

from palkit.trainer.config import TrainConfig
from palkit.trainer.placement import check_placement, pal_layer_indices, placement_name


@pytest.mark.parametrize("which, layers", [
    ("all", (0, 1, 2, 3, 4, 5)), ("top", (3, 4, 5)), ("bottom", (0, 1, 2)),
    ("top-1", (5,)), ("top-2", (4, 5)), ("top-6", (0, 1, 2, 3, 4, 5)),
    ("3,4,5", (3, 4, 5)), ("5,1", (1, 5)), ("2", (2,))])
def test_spellings_mean_the_layers_they_say(which, layers):
    assert pal_layer_indices(6, which) == layers


@pytest.mark.parametrize("which, layers, name", [
    ("all", (0, 1, 2, 3, 4, 5), "all"), ("top", (3, 4, 5), "top"), ("bottom", (0, 1, 2), "bottom"),
    ("top-2", (4, 5), "top-2"), ("1,3", (1, 3), "1,3")])
def test_placement_name_is_the_shortest_spelling(which, layers, name):
    assert placement_name(list(layers), 6) == name
    assert pal_layer_indices(6, placement_name(list(layers), 6)) == layers


@pytest.mark.parametrize("which, words", [
    ("middle", "must be all, top, bottom, top-N"), ("top-0", "N >= 1"), ("3,,4", "must be all"),
    ("-1", "must be all")])
def test_bad_spellings_are_refused_before_any_model_loads(which, words):
    with pytest.raises(ValueError, match=words):
        check_placement(which)
    with pytest.raises(ValueError, match=words):
        TrainConfig(pal_layers=which)


@pytest.mark.parametrize("which, words", [("top-7", "only 6 layers"),
                                          ("2,6", "layer 6 does not exist")])
def test_placements_beyond_the_trunk_are_refused(which, words):
    with pytest.raises(ValueError, match=words):
        pal_layer_indices(6, which)


@pytest.mark.slow
def test_any_placement_trains_exports_and_runs_on_both_runtimes(tmp_path, tiny_bert, tiny_data):
    """PALs in layer 1 only (of 2): train, export fp32 for ExecuTorch (forward, and
    forward_all, which forks the tasks at layer 1) and ONNX Runtime; each runtime matches
    PyTorch (export's verification) and all tasks at once equal each task alone."""
    from testing_utils import tiny_config

    from palkit.export.bundle import export_run
    from palkit.export.options import ExportOptions
    from palkit.runtime.bundle import load_bundle
    from palkit.runtime.engine import Engine
    from palkit.trainer.checkpoint import load_model, resolve_model_dir
    from palkit.trainer.train import train

    run = train(tiny_config(tiny_bert, tiny_data, tmp_path / "run", pal_layers="1", epochs=1))
    model, _, _ = load_model(resolve_model_dir(run))
    assert model.pal.layers == (1,) and model.first_adapted_layer("sst") == 1
    (bundle,) = export_run(run, tmp_path / "bundle",
                           ExportOptions(target="android", quant="fp32", tasks=["sst", "sts"], data_dir=tiny_data),
                           log=lambda *a: None)
    et, ort = Engine(load_bundle(bundle), "executorch"), Engine(load_bundle(bundle), "onnxruntime")
    for task, texts in (("sst", ("the movie was good",)), ("sts", ("a man is running",
                                                                   "two people are playing"))):
        a, b = et.predict(task, *texts), ort.predict(task, *texts)
        np.testing.assert_allclose(a.outputs, b.outputs, atol=1e-4)
    ids, mask, types = et.tokenizer("a man is running", "two people are playing")
    together, _ = et.run_all_ids(ids, mask, types)
    np.testing.assert_allclose(together["sts"], et.run_ids("sts", ids, mask, types)[0],
                               atol=1e-5)
