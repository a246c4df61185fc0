"""verl 0.9.1's own rollout dump, run outside a trainer: ``RayPPOTrainer._dump_generations``
(and the ``_write_generations``, ``_init_dump_executor``, ``_shutdown_dump_executor`` it uses),
taken from the installed ``verl/trainer/ppo/ray_trainer.py`` and run as they are.

Why the methods' own text rather than ``import verl.trainer.ppo.ray_trainer``: importing that
module pulls the whole rollout stack (vLLM's router, cachetools, torch: ~30 s here, and it
fails without cachetools), none of which the dump touches. The methods are compiled from the
installed file unchanged, in a namespace holding what they use (json, os, ThreadPoolExecutor),
so the lines a test reads are the ones verl writes.

    dumper = VerlDumper()
    dumper.dump(step, inputs, outputs, gts, scores, extras, folder)   # {folder}/{step}.jsonl
    dumper.close()
"""

from __future__ import annotations

import ast
import json
import os
from concurrent.futures import ThreadPoolExecutor
from importlib.util import find_spec
from pathlib import Path
from typing import Any

METHODS = (
    "_write_generations",
    "_dump_generations",
    "_init_dump_executor",
    "_shutdown_dump_executor",
)


def _trainer_source() -> Path:
    spec = find_spec("verl")
    assert spec is not None and spec.origin, "verl is not installed"
    return Path(spec.origin).parent / "trainer" / "ppo" / "ray_trainer.py"


def _verl_methods() -> dict[str, Any]:
    path = _trainer_source()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RayPPOTrainer")
    found = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in METHODS]
    assert {f.name for f in found} == set(METHODS), f"verl's {path} changed: {METHODS}"
    module = ast.Module(body=found, type_ignores=[])
    namespace: dict[str, Any] = {
        "json": json,
        "os": os,
        "ThreadPoolExecutor": ThreadPoolExecutor,
        "staticmethod": staticmethod,
    }
    exec(compile(module, str(path), "exec"), namespace)  # verl's own text, unchanged
    return {name: namespace[name] for name in METHODS}


class VerlDumper:
    """An object with verl's dump methods and the one attribute they read (global_steps)."""

    def __init__(self) -> None:
        methods = _verl_methods()
        self._cls = type("Dumper", (), methods)
        self._obj = self._cls()
        self._obj._init_dump_executor()

    def dump(
        self,
        step: int,
        inputs: list[str],
        outputs: list[str],
        gts: list[Any],
        scores: list[float],
        extras: dict[str, list[Any]],
        folder: str,
    ) -> None:
        self._obj.global_steps = step
        self._obj._dump_generations(
            inputs=inputs,
            outputs=outputs,
            gts=gts,
            scores=scores,
            reward_extra_infos_dict=extras,
            dump_path=folder,
        )

    def close(self) -> None:
        self._obj._shutdown_dump_executor()
