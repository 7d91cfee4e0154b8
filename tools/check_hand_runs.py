#!/usr/bin/env python3
"""Checks that no test or tool assembles a training run by hand: a Scheduler is built inside engine/ (the
Trainer), and tests/ and tools/ train through the Trainer (engine/train/trainer.h: it takes a model name, a
network description, the caller's graph or a plan the caller made, with hooks around each batch). ALLOWED
lists the files that still build a Scheduler of their own, each a test of the scheduler itself or of what
the Trainer cannot run, and why; the list may only shrink: a file on it that no longer builds one is an
error too, so the list stays true. Exits 1 listing each problem."""
import pathlib
import re
import sys

# file -> why it still builds a Scheduler itself
ALLOWED = {
    "tests/trained_model.h": "drives the scheduler's own interface step by step (loader, scheduler, optimizer) for "
                             "training_test (train_batch binds named inputs in any order, each once, and gives a "
                             "streamed MicroBatchSource's bits; micro-batched against whole-batch gradients; evaluate; "
                             "no heap allocation per step), data_parallel_test (set_data_parallel with a "
                             "GradientReducer: buckets summed in the last backward, a rank with no samples) and "
                             "cuda_engine_test (the same micro-batches on the CPU and CUDA)",
    "tests/norm_invariance_test.cc": "tests Scheduler::train_batch's own refusal of a micro-batch that splits a "
                                     "BatchNorm group (the Trainer's planning refuses one before a scheduler exists)",
}

BUILDS = re.compile(r"\bScheduler\s+\w+\s*[({;]|<Scheduler>|\bnew\s+Scheduler\b|\bScheduler\s*[({]")


def builds_scheduler(text: str) -> bool:
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
    code = re.sub(r'"(?:\\.|[^"\\])*"', '""', code)
    return bool(BUILDS.search(code))


def main() -> int:
    root = pathlib.Path(__file__).resolve().parent.parent
    found = set()
    for folder in ("tests", "tools"):
        for f in sorted((root / folder).rglob("*")):
            if f.suffix in (".cc", ".h", ".cu") and builds_scheduler(f.read_text()):
                found.add(f.relative_to(root).as_posix())
    problems = [f"{f}: builds a Scheduler by hand; train through the Trainer (Trainer(cfg, graph, data), "
                "Trainer(cfg, plan, data), set_batch_hooks)" for f in sorted(found - ALLOWED.keys())]
    problems += [f"{f}: on ALLOWED but builds no Scheduler any more; take it off the list"
                 for f in sorted(ALLOWED.keys() - found)]
    for p in problems:
        print(p)
    print(f"check_hand_runs: {len(found)} file(s) build a Scheduler, {len(ALLOWED)} allowed, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
