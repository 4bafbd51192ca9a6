"""Privacy: once a model is exported, no pureMind process sends anything over the network, from any thread or
native library.

The socket-blocking test in test_models_e2e.py sees Python's sockets only; onnxruntime's telemetry (1.29+, on
Linux and macOS) runs in native threads and slips past it. Here `puremind index`, `puremind search` and
`puremind serve` run under `strace -f`, which records every connect and send of every thread of every process,
inside a network namespace of their own when `unshare -n` works (so that a regression sends nothing anywhere: the
attempt is still recorded). HF_HUB_OFFLINE and the telemetry variables are unset, as for a user who never heard
of them, and so are the CI variables (CI=true and the like), which onnxruntime reads to stay quiet in CI. `serve` is held open well past the ~9 s after which onnxruntime's uploader first looks up its host.

The stand-ins are exported with torch and Optimum; a runtime-only run (no torch) reuses the exports the first run
left in the folder STANDIN_EXPORTS names (.ci/run sets it), so the onnxruntime path is tested as shipped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from conftest import meta, write

REPO = Path(__file__).resolve().parent.parent
EMBEDDER = "puremind-standin/qwen3"
RERANKER = "puremind-standin/xlmr"
TRACED = "connect,sendto,sendmsg,sendmmsg"
#: How long `serve` stays up after its search. onnxruntime's uploader first resolves its host about 9 s after a
#: model loads, then every few seconds (../shared/notes/toolchain.md, "Measured in turn 2").
HOLD_S = 20.0
#: How long the companion test waits for onnxruntime's uploader when telemetry is left on (a loaded machine
#: starts it later than an idle one).
TELEMETRY_WAIT_S = 75.0
#: A connect or send on an IPv4/IPv6 socket: by address family, or by the fd strace -yy labels TCP/UDP.
INET = re.compile(r"\bAF_INET6?\b|<(?:TCP|UDP|UDPLITE|RAW)(?:v6)?:")
#: A connect that reached a local name-resolving daemon (nscd, systemd-resolved): the lookup it carries leaves
#: the machine through the daemon, outside any network namespace, so it counts as a network call too.
RESOLVER = re.compile(r'connect\(.*sun_path="(?:/var)?/run/(?:nscd/socket|systemd/resolve/[^"]*)".*\)\s*=\s*0\b')
#: Variables that would hide a leak: offline switches and telemetry opt-outs the user has not set.
#: onnxruntime also turns its uploader off where one of the CI variables is set (CI=true, as CI runs this suite,
#: silenced it and hid it from both tests: measured here, 0 calls in 75 s with CI=true, calls within 10 s without),
#: so the children run as a user's shell, outside CI.
CI_VARIABLES = ("CI", "TF_BUILD", "GITHUB_ACTIONS", "GITLAB_CI", "CIRCLECI", "TRAVIS", "JENKINS_URL",
                "CODEBUILD_BUILD_ID", "BUILDKITE", "TEAMCITY_VERSION", "APPVEYOR", "BITBUCKET_BUILD_NUMBER")
UNSET = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY",
         "ORT_DISABLE_TELEMETRY", *CI_VARIABLES)

pytestmark = pytest.mark.filterwarnings("ignore")


def _works(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.fixture(scope="module")
def tracer() -> list[str]:
    """The command prefix that records a process tree's network calls: strace -f, in a network namespace of its
    own when this machine allows one. Writes to the file passed after it (see `traced`)."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (.ci/run installs it): native network calls cannot be seen")
    if not _works(["strace", "-f", "-o", os.devnull, "true"]):
        pytest.skip("strace is installed but cannot trace here (ptrace not permitted)")
    return ["unshare", "-n"] if shutil.which("unshare") and _works(["unshare", "-n", "true"]) else []


def traced(tracer: list[str], log: Path, argv: list[str]) -> list[str]:
    return [*tracer, "strace", "-f", "-yy", "-qq", "-e", "signal=none", "-e", f"trace={TRACED}", "-o", str(log), *argv]


def _whole_calls(text: str) -> list[str]:
    """strace's lines with each call that another thread interrupted ("<unfinished ...>" ... "<... resumed>")
    joined back into one line, so its result can be read."""
    pending: dict[str, str] = {}
    calls = []
    for line in text.splitlines():
        pid, _, rest = line.strip().partition(" ")
        if rest.endswith("<unfinished ...>"):
            pending[pid] = rest[: -len("<unfinished ...>")]
        elif rest.startswith("<... ") and " resumed>" in rest and pid in pending:
            calls.append(f"{pid} {pending.pop(pid)}{rest.split(' resumed>', 1)[1]}")
        else:
            calls.append(line.strip())
    calls.extend(f"{pid} {call}" for pid, call in pending.items())
    return calls


def network_calls(log: Path) -> list[str]:
    """The recorded connect/send calls on IPv4/IPv6 sockets, and connects that reached a local resolver daemon
    (other AF_UNIX sockets and netlink are local)."""
    if not log.is_file():
        return []
    return [call for call in _whole_calls(log.read_text(errors="replace"))
            if INET.search(call) or RESOLVER.search(call)]


def _build(world: Path) -> None:
    """Stand-in embedder and reranker as hub-cache snapshots under `world/hub`, exported (int8, the CPU's variant)
    into `world/home` by `puremind export-models`, in this process."""
    pytest.importorskip("torch")
    pytest.importorskip("optimum.exporters.onnx")
    from puremind import cli
    from scripts.standins import build_qwen3, build_xlmr_reranker, save_as_hub_snapshot, write_sentence_transformers_pooling

    src = world / "src"
    q = build_qwen3(src / "qwen3")
    write_sentence_transformers_pooling(q, "last_token")
    r = build_xlmr_reranker(src / "xlmr")
    save_as_hub_snapshot(q, world / "hub", EMBEDDER, "a" * 40)
    save_as_hub_snapshot(r, world / "hub", RERANKER, "b" * 40)
    shutil.rmtree(src)
    with pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith("PUREMIND_")]:
            mp.delenv(key)
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_HUB_CACHE", str(world / "hub"))
        mp.setenv("PUREMIND_HOME", str(world / "home"))
        mp.setenv("PUREMIND_EMBED_MODEL", EMBEDDER)
        mp.setenv("PUREMIND_RERANK_MODEL", RERANKER)
        assert cli.run(["export-models", "--variant", "int8"]) == 0


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with `hub/` (the stand-ins' snapshots) and `home/` (their exports): built here, or copied from
    STANDIN_EXPORTS when an earlier run left it there; an earlier run that finds STANDIN_EXPORTS empty fills it."""
    world = tmp_path_factory.mktemp("privacy") / "world"
    shared = os.environ.get("STANDIN_EXPORTS")
    if shared and (Path(shared) / "ready").is_file():
        shutil.copytree(shared, world)  # copy2: mtimes kept, so the exports' verified stamps still match
        return world
    _build(world)
    if shared:
        part = Path(f"{shared}.part-{os.getpid()}")
        shutil.rmtree(part, ignore_errors=True)
        shutil.copytree(world, part)
        (part / "ready").write_text("stand-in exports for tests/test_privacy.py\n")
        shutil.rmtree(shared, ignore_errors=True)
        part.rename(shared)
    return world


def child_env(world: Path, vault: Path, tmp_path: Path) -> dict[str, str]:
    """The environment of a user who set none of the offline or telemetry variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUREMIND_") and k not in UNSET}
    env.update(
        PUREMIND_HOME=str(tmp_path / "home"), PUREMIND_DB=str(tmp_path / "index.sqlite"), PUREMIND_VAULT=str(vault),
        PUREMIND_EMBED_MODEL=EMBEDDER, PUREMIND_RERANK_MODEL=RERANKER, HF_HUB_CACHE=str(tmp_path / "hub"),
        HF_HOME=str(tmp_path / "hf-home"), PYTHONPATH=str(REPO),
    )
    shutil.copytree(world / "home", tmp_path / "home")
    shutil.copytree(world / "hub", tmp_path / "hub")
    return env


def _serve_one_search(cmd: list[str], env: dict[str, str], log: Path, errlog: Path, hold_s: float = HOLD_S) -> dict:
    """Start `cmd` (serve, traced) through the MCP SDK's client, search once, keep it up `hold_s` seconds (or until
    the trace shows a network call), check it still answers, and return the search's structured result."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    found: dict = {}

    async def scenario() -> None:
        params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=env, cwd=str(REPO))
        with errlog.open("w") as err:
            async with stdio_client(params, errlog=err) as (read, write_stream):
                async with ClientSession(read, write_stream, read_timeout_seconds=60) as session:
                    await session.initialize()
                    result = await session.call_tool("puremind_search", {"query": "grinder espresso dose"})
                    assert not result.is_error, result.content
                    found.update(result.structured_content)
                    deadline = time.monotonic() + hold_s
                    while time.monotonic() < deadline and not network_calls(log):
                        await anyio.sleep(0.25)
                    await session.call_tool("puremind_recent", {})  # still alive through the whole window

    async def bounded() -> None:
        with anyio.fail_after(hold_s + 120):
            await scenario()

    anyio.run(bounded)
    return found


@pytest.mark.slow
def test_index_search_and_serve_with_an_exported_model_send_nothing_over_the_network(exported, tracer, vault, tmp_path):
    env = child_env(exported, vault, tmp_path)
    write(vault, "japan.md", "# 旅行\n\n京都駅から歩いて十分の旅館に二泊した。\n")
    logs = {name: tmp_path / f"{name}.strace" for name in ("index", "search", "serve")}
    puremind = [sys.executable, "-m", "puremind"]

    done = subprocess.run(traced(tracer, logs["index"], [*puremind, "index"]), env=env, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert (meta(tmp_path / "index.sqlite", "embed_fingerprint") or "").startswith(EMBEDDER + "@"), "not indexed with the model"
    done = subprocess.run(traced(tracer, logs["search"], [*puremind, "search", "grinder espresso dose", "--json"]),
                          env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert '"mode": "reranked"' in done.stdout, "the search did not run both models"
    result = _serve_one_search(traced(tracer, logs["serve"], [*puremind, "serve"]), env, logs["serve"],
                               tmp_path / "serve.err")
    assert result["mode"] == "reranked" and result["results"], result

    seen = {name: network_calls(log) for name, log in logs.items()}
    assert all(log.is_file() for log in logs.values()), "strace did not run"
    leaks = [f"{name}: {line}" for name, lines in seen.items() for line in lines[:5]]
    assert not leaks, "network calls from a cached, exported model:\n" + "\n".join(leaks)


def test_the_tracer_records_a_connect_made_outside_python_code_in_another_thread(tracer, tmp_path):
    # A UDP connect sends no packet, and inside the namespace the loopback is down, yet the call must be recorded
    # from a thread that is not the main one and through the C socket module, with no Python patch to catch it,
    # or the test above proves nothing.
    log = tmp_path / "probe.strace"
    code = ("import _socket, threading\n"
            "def reach():\n"
            "    s = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)\n"
            "    try: s.connect(('127.0.0.1', 9))\n"
            "    except OSError: pass\n"
            "t = threading.Thread(target=reach); t.start(); t.join()\n")
    subprocess.run(traced(tracer, log, [sys.executable, "-c", code]), capture_output=True, timeout=60)
    assert any("127.0.0.1" in line for line in network_calls(log)), log.read_text()


@pytest.mark.parametrize(
    ("given", "expected"), [(None, "1"), ("", "1"), ("0", "0"), ("1", "1"), ("true", "true")]
)
def test_importing_puremind_turns_onnxruntime_telemetry_off_unless_the_user_chose(given, expected):
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    if given is not None:
        env["ORT_DISABLE_TELEMETRY"] = given
    code = "import os, puremind, puremind.cli; print(os.environ['ORT_DISABLE_TELEMETRY'])"
    out = subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": str(REPO)}, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert out.strip() == expected


def _onnxruntime_version() -> tuple[int, int]:
    from importlib.metadata import version

    return tuple(int(part) for part in version("onnxruntime").split(".")[:2])  # type: ignore[return-value]


@pytest.mark.slow
@pytest.mark.skipif(_onnxruntime_version() < (1, 29),
                    reason="onnxruntime has no telemetry uploader before 1.29: there is nothing for the trace to see")
def test_the_trace_sees_onnxruntimes_own_telemetry_when_the_user_leaves_it_on(exported, tracer, vault, tmp_path):
    # The test above must fail on code that does not turn the telemetry off: with ORT_DISABLE_TELEMETRY=0 (the
    # user's choice, which pureMind respects) onnxruntime's uploader looks up its host from a native thread, and
    # the trace records it. If onnxruntime ever drops its telemetry this fails and says so.
    env = child_env(exported, vault, tmp_path)
    env["ORT_DISABLE_TELEMETRY"] = "0"
    done = subprocess.run([sys.executable, "-m", "puremind", "index"], env=env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr
    log = tmp_path / "serve.strace"
    _serve_one_search(traced(tracer, log, [sys.executable, "-m", "puremind", "serve"]), env, log, tmp_path / "serve.err",
                      hold_s=TELEMETRY_WAIT_S)
    if network_calls(log):
        return
    # Nothing seen. That proves something only where a name lookup reaches the network at all: a machine whose
    # resolver answers from files alone (nsswitch "hosts: files", no nameserver) gives the uploader nothing to
    # send, and the trace nothing to see.
    probe = tmp_path / "lookup.strace"
    code = ("import _socket, threading\n"
            "def look():\n"
            "    try: _socket.getaddrinfo('mobile.events.data.microsoft.com', 443)\n"
            "    except OSError: pass\n"
            "t = threading.Thread(target=look); t.start(); t.join()\n")
    subprocess.run(traced(tracer, probe, [sys.executable, "-c", code]), capture_output=True, timeout=60)
    if not network_calls(probe):
        pytest.skip("a name lookup on this machine makes no network call (resolver answers from files only), so "
                    "onnxruntime's telemetry cannot be seen here")
    calls = [c for c in _whole_calls(log.read_text(errors="replace")) if "connect(" in c][:10]
    pytest.fail(f"no network call from onnxruntime with its telemetry on in {TELEMETRY_WAIT_S:.0f} s, while a name "
                "lookup here is seen: is the uploader gone? connects seen:\n" + "\n".join(calls))
