"""The bundle runtime: the bundle format (manifest, signing), tokenizer, inputs, the runners of
ExecuTorch and ONNX Runtime files, the decoding of outputs, and the task kinds.

Torch-free by rule (tests/test_layout.py): it imports nothing of palkit's but core, and no torch,
typer or rich at module level, so the arm64 Python under qemu runs `palkit.runtime.score_worker`
with onnxruntime, numpy and tokenizers alone. Everything that runs a bundle calls
`palkit.runtime.engine.Engine`.
"""
