#!/usr/bin/env python3
"""Checks that every repository path docs/*.md (and README.md) names exists: a token that starts with one of
the repository's top-level folders (engine/graph/op.h, tools/train/, docs/memory.md), with a brace list
expanded (options.{h,cc}); a markdown link's target, relative to the page; and a bare source file name in
backticks (`trainer.cc`): after a backticked path on the same line it reads as a file of that path's
folder, or of that folder ("`engine/run/params.cc`, `executor.cc`"; "`engine/base` ... `registry.h`")
and must be there, otherwise it must exist somewhere. Placeholders (<family>, *, ...) are skipped. Exits 1
listing each missing one as file:line."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOP = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name != "build")
PATH = re.compile(r"(?<![\w./~-])((?:%s)/[\w./{},+*<>-]*)" % "|".join(map(re.escape, TOP)))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
BARE = re.compile(r"`([\w-]+\.(?:cc|h|cu|cuh|py|sh|md|ipynb))`")
TICKED = re.compile(r"`([^`]+)`")


def expand(token: str):
    m = re.search(r"\{([^{}]*)\}", token)
    if not m:
        return [token]
    return [x for alt in m.group(1).split(",") for x in expand(token[:m.start()] + alt + token[m.end():])]


def main() -> int:
    files = {p.name for p in ROOT.rglob("*") if p.is_file() and "build" not in p.relative_to(ROOT).parts[:1]
             and not any(part.startswith(".") for part in p.relative_to(ROOT).parts)}
    pages = sorted((ROOT / "docs").glob("**/*.md")) + [ROOT / "README.md"]
    missing, checked = [], 0
    for page in pages:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            where = f"{page.relative_to(ROOT)}:{n}"
            for token in PATH.findall(line):
                token = token.rstrip(".,")
                for path in expand(token):
                    if re.search(r"[<>*]|\.\.\.", path):
                        continue
                    checked += 1
                    if not (ROOT / path).exists():
                        missing.append(f"{where}: {path} does not exist")
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):
                    continue
                checked += 1
                if not (page.parent / target).exists():
                    missing.append(f"{where}: link {target} does not exist")
            folder = None
            for ticked in TICKED.findall(line):
                if PATH.fullmatch(ticked):
                    folder = ticked.rstrip("/") if (ROOT / ticked).is_dir() else ticked.rsplit("/", 1)[0]
                    continue
                if not BARE.fullmatch(f"`{ticked}`"):
                    continue
                checked += 1
                if folder and not any((ROOT / f).exists() for f in expand(f"{folder}/{ticked}")):
                    missing.append(f"{where}: {ticked}, after a path in {folder}/, is not in {folder}/")
                elif not folder and ticked not in files:
                    missing.append(f"{where}: {ticked} is no file of the repository")
    for m in missing:
        print(m)
    print(f"check_doc_paths: {checked} path(s) named, {len(missing)} missing")
    return 1 if missing or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
