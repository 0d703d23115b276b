"""Shared by mcore4j's scripts/make_*_module.py: script a module, check it, save it, check the saved copy.

A module's script calls write_checked(ModuleClass(), check, path); check raises (SystemExit) if the module
computes something else than its definition. The archive is checked again after loading it back, so what
is committed is what was checked.
"""
from typing import Callable

import torch


def write_checked(module: torch.nn.Module, check: Callable[[torch.jit.ScriptModule], None], path: str) -> None:
    scripted = torch.jit.script(module)
    check(scripted)
    scripted.save(path)
    check(torch.jit.load(path))
    print(scripted.code)
    print(f"wrote {path} with torch {torch.__version__}")
