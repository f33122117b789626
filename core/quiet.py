"""Silence third-party noise that a user cannot act on; `--verbose` keeps all of it.

The noise (measured on export / predict / evaluate / bench; torch 2.13, torchao 0.18, executorch
1.5.1): the log chatter and warnings of NOISY_LOGGERS (e.g. torchao's "Failed to load
..._C_mxfp8...so": CUDA kernels absent on a CPU build), the tracer's TRACER_NOTES on the peers'
legacy ONNX export, and ExecuTorch's NATIVE_NOISE, printed by its C++ runtime on file descriptor
2 and so filtered there. Errors are never hidden: logging at ERROR and above stays on, and native
output captured around a call that fails is printed in full."""
from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

VERBOSE_ENV = "PALKIT_VERBOSE"
# ExecuTorch's threadpool start-up reports what it read about the CPU: never actionable.
NATIVE_NOISE = re.compile(rb"^\[(cpuinfo_utils|threadpool)\.cpp:\d+\] ")
NOISY_LOGGERS = ("torchao", "torch.utils._pytree", "torch._export", "torch.export",
                 "executorch", "onnxruntime", "onnxscript", "transformers", "huggingface_hub")
TRACER_NOTES = ("Converting a tensor to a Python boolean might cause the trace",
                "Exporting aten::index operator of advanced indexing")
# Inherited by worker processes (bench runs every configuration in a fresh one).
QUIET_ENVIRONMENT = {"PYTHONWARNINGS": "ignore::FutureWarning,ignore::DeprecationWarning",
                     "TRANSFORMERS_VERBOSITY": "error", "TORCH_CPP_LOG_LEVEL": "ERROR",
                     "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def is_verbose() -> bool:
    return os.environ.get(VERBOSE_ENV) == "1"


def configure(verbose: bool) -> None:
    """Set warnings filters and library log levels for this process and its children."""
    if verbose:
        os.environ[VERBOSE_ENV] = "1"
        for key, value in QUIET_ENVIRONMENT.items():
            if os.environ.get(key) == value:  # ours, from a quiet parent; a user's own stays
                os.environ.pop(key)
        warnings.resetwarnings()
        logging.getLogger().setLevel(logging.INFO)
        for name in NOISY_LOGGERS:
            logging.getLogger(name).setLevel(logging.NOTSET)
        return
    os.environ.pop(VERBOSE_ENV, None)
    for key, value in QUIET_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    for message in TRACER_NOTES:
        warnings.filterwarnings("ignore", message=message)
    logging.getLogger().setLevel(logging.ERROR)
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


@contextmanager
def native_stderr_filtered() -> Iterator[None]:
    """Drop ExecuTorch's known start-up lines that native code writes to file descriptor 2: it
    points at a temporary file meanwhile, then every other line (on an exception, every line) is
    written back to the real stderr."""
    if is_verbose():
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        failed = True
        try:
            yield
            failed = False
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            kept = [line for line in capture if failed or not NATIVE_NOISE.match(line)]
            if kept:
                sys.stderr.buffer.write(b"".join(kept))
                sys.stderr.flush()
