"""The command line as a user meets it: commands, messages on stderr and exit codes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import write
from puremind import cli


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def indexed(capsys, vault, puremind_home) -> Path:
    code, out, err = run(capsys, "init", str(vault))
    assert code == 0, err
    code, out, err = run(capsys, "index")
    assert code == 0, err
    return vault


def test_help_does_not_import_onnxruntime_or_torch():
    code = (
        "import sys, io, contextlib\n"
        "import puremind.cli as c\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    rc = c.run(['--help'])\n"
        "bad = [m for m in ('onnxruntime', 'torch', 'transformers', 'tokenizers') if m in sys.modules]\n"
        "print(rc, bad, 'index' in buf.getvalue())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "0 [] True"


def test_python_dash_m_puremind_runs_the_cli():
    proc = subprocess.run([sys.executable, "-m", "puremind", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "search" in proc.stdout


def test_init_writes_a_private_config_naming_the_vault(capsys, vault, puremind_home):
    code, out, err = run(capsys, "init", str(vault))
    assert code == 0, err
    config = puremind_home / "config.toml"
    assert f'vault = "{vault}"' in config.read_text()
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert stat.S_IMODE(puremind_home.stat().st_mode) == 0o700


def test_init_refuses_to_overwrite_without_force_and_force_keeps_settings(capsys, vault, puremind_home, tmp_path):
    run(capsys, "init", str(vault))
    config = puremind_home / "config.toml"
    config.write_text(config.read_text().replace("# candidates = 50", "candidates = 17"))
    code, out, err = run(capsys, "init", str(vault))
    assert code == 2 and err.startswith("error:") and "--force" in err
    other = tmp_path / "other"
    other.mkdir()
    code, out, err = run(capsys, "init", str(other), "--force")
    assert code == 0, err
    text = config.read_text()
    assert "candidates = 17" in text and f'vault = "{other}"' in text


def test_init_with_a_missing_vault_is_an_error(capsys, tmp_path):
    code, out, err = run(capsys, "init", str(tmp_path / "missing"))
    assert code == 2
    assert err.splitlines()[0].startswith("error: the vault") and "does not exist" in err


def test_a_broken_config_names_the_file_and_line(capsys, puremind_home):
    puremind_home.mkdir()
    (puremind_home / "config.toml").write_text('vault = "/tmp"\n[retrieval]\ncandidates = = 3\n')
    code, out, err = run(capsys, "search", "x")
    assert code == 2
    first = err.splitlines()[0]
    assert first.startswith("error: broken config file") and str(puremind_home / "config.toml") in first
    assert "line 3" in first


def test_an_unknown_config_key_is_an_error_listing_the_known_ones(capsys, puremind_home):
    puremind_home.mkdir()
    (puremind_home / "config.toml").write_text("[retrieval]\ncandidate = 3\n")
    code, out, err = run(capsys, "search", "x")
    assert code == 2 and "unknown setting [retrieval] candidate" in err and "candidates" in err


def test_a_more_open_config_and_home_are_tightened_on_use(capsys, indexed, puremind_home):
    os.chmod(puremind_home / "config.toml", 0o644)
    os.chmod(puremind_home, 0o755)
    os.chmod(puremind_home / "index.sqlite", 0o644)
    code, out, err = run(capsys, "search", "grinder", "--lexical-only")
    assert code == 0, err
    assert stat.S_IMODE((puremind_home / "config.toml").stat().st_mode) == 0o600
    assert stat.S_IMODE(puremind_home.stat().st_mode) == 0o700
    assert stat.S_IMODE((puremind_home / "index.sqlite").stat().st_mode) == 0o600


def test_index_prints_a_one_line_summary(capsys, vault, puremind_home):
    run(capsys, "init", str(vault))
    code, out, err = run(capsys, "index")
    assert code == 0, err
    assert out.strip().splitlines() == [out.strip()]
    assert "3 added, 0 changed, 0 removed, 0 unchanged" in out
    code, out, err = run(capsys, "index")
    assert "0 added, 0 changed, 0 removed, 3 unchanged" in out


def test_index_takes_the_vault_as_an_argument_without_init(capsys, vault):
    code, out, err = run(capsys, "index", str(vault))
    assert code == 0, err
    assert "3 added" in out


def test_index_without_a_vault_says_how_to_set_one(capsys):
    code, out, err = run(capsys, "index")
    assert code == 2
    assert err.startswith("error: no vault directory is set") and "hint: run `puremind init" in err


def test_lexical_search_prints_path_line_heading_and_score(capsys, indexed):
    code, out, err = run(capsys, "search", "grinder espresso", "--lexical-only")
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith("1. coffee.md:") and "bm25" in first
    assert "Coffee > Grinder" in out


def test_search_json_gives_every_field(capsys, indexed):
    code, out, err = run(capsys, "search", "grinder", "--lexical-only", "--json")
    assert code == 0, err
    data = json.loads(out)
    hit = data["results"][0]
    assert data["mode"] == "lexical"
    assert hit["path"] == "coffee.md" and hit["heading_path"] == ["Coffee", "Grinder"]
    assert 1 <= hit["start_line"] <= hit["end_line"] and hit["score"] > 0 and "grinder" in hit["text"]


def test_a_hybrid_search_shows_the_part_of_the_passage_that_matches_cut_at_words(capsys, indexed):
    filler = "A sentence about something else entirely, to fill the passage up. " * 8
    write(indexed, "long.md", f"# Long\n\n{filler}The zeppelin hangar opens at dawn for the inspection. {filler}\n")
    assert cli.run(["index"]) == 0
    capsys.readouterr()
    code, out, err = run(capsys, "search", "zeppelin hangar", "--no-rerank", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["mode"] == "hybrid"
    excerpt = data["results"][0]["excerpt"]
    assert "zeppelin hangar opens at dawn" in excerpt and excerpt.startswith("…") and excerpt.endswith("…")
    assert len(excerpt) <= 200 and excerpt.strip("…") in " ".join(data["results"][0]["text"].split())
    code, out, err = run(capsys, "search", "zeppelin hangar", "--no-rerank")
    assert "zeppelin hangar opens at dawn" in out.splitlines()[2]


def test_a_search_that_finds_nothing_exits_1(capsys, indexed):
    code, out, err = run(capsys, "search", "xylophone", "--lexical-only")
    assert code == 1
    assert "error" not in err


def test_a_search_without_an_index_is_an_error(capsys):
    code, out, err = run(capsys, "search", "anything", "--lexical-only")
    assert code == 2 and err.startswith("error: no index") and "puremind index" in err


@pytest.mark.parametrize("limit", ["0", "51", "many"])
def test_limit_outside_1_to_50_is_refused(capsys, indexed, limit):
    code, out, err = run(capsys, "search", "grinder", "--limit", limit)
    assert code == 2 and err.startswith("error:")


def test_limit_caps_the_number_of_results(capsys, indexed):
    code, out, err = run(capsys, "search", "the", "--lexical-only", "--limit", "1", "--json")
    assert code == 0 and len(json.loads(out)["results"]) == 1


AGENT_QUERIES = [
    '"unbalanced quote',
    'grinder"',
    "grind*",
    "title:grinder",
    "grinder NEAR espresso",
    "NEAR(grinder espresso)",
    "-grinder",
    "grinder -espresso",
    "(grinder OR",
    "AND OR NOT",
    "x" * 20000,
    " ".join(f"word{i}" for i in range(500)),
    "SELECT * FROM chunks; DROP TABLE files; --",
    "grinder\x00espresso",
    "^grinder",
    "{title}: grinder",
    "C++ templates",
    "日本語のテキスト",
]


@pytest.mark.parametrize("query", AGENT_QUERIES)
def test_any_agent_query_is_searched_never_an_sql_error(capsys, indexed, query):
    code, out, err = run(capsys, "search", "--lexical-only", "--", query)
    assert code in (0, 1), err
    assert "sqlite" not in err.lower() and "Traceback" not in err


def test_a_query_that_looks_like_an_option_gets_a_hint_about_double_dash_after_the_options(capsys, indexed):
    code, out, err = run(capsys, "search", "-grinder")
    assert code == 2 and "put `--` before the query, after any option" in err
    example = err.split("hint: ")[1].split(": ", 1)[1].strip()
    assert example == "puremind search --limit 5 -- '-text'"
    code, out, err = run(capsys, *example.replace("'", "").split()[1:])  # the example as given works
    assert code == 1 and "nothing found" in out and "error" not in err


def test_version_prints_the_installed_package_version(capsys):
    from importlib.metadata import version

    code, out, err = run(capsys, "--version")
    assert (code, out, err) == (0, f"puremind {version('puremind')}\n", "")
    proc = subprocess.run([sys.executable, "-m", "puremind", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == out


def test_help_lists_every_command_with_its_whole_description(capsys):
    import typer

    code, out, err = run(capsys, "--help")
    listing = " ".join(out.split("Commands:")[1].split())
    assert code == 0 and "..." not in listing
    command = typer.main.get_command(cli.app)
    for name, sub in command.commands.items():
        whole = " ".join((sub.help or "").split("\n\n")[0].split())
        assert f"{name} {whole}" in listing, name


@pytest.mark.parametrize("query", ["", "   ", "*", '""', "-- ( ) :"])
def test_a_query_without_words_is_refused_with_a_clear_message(capsys, indexed, query):
    code, out, err = run(capsys, "search", "--lexical-only", "--", query)
    assert code == 2
    assert err.startswith("error: the search query")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.text(max_size=80))
def test_random_query_text_never_raises_an_sql_error(capsys, indexed, query):
    code = cli.run(["search", "--lexical-only", "--json", "--", query])
    out, err = capsys.readouterr()
    assert code in (0, 1, 2)
    if code == 2:
        assert err.startswith("error: the search query"), err


def test_ctrl_c_exits_130(capsys, vault, monkeypatch):
    import puremind.services

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(puremind.services, "run_index", interrupted)
    code, out, err = run(capsys, "index", str(vault))
    assert code == 130


def test_an_unknown_command_is_an_error(capsys):
    code, out, err = run(capsys, "frobnicate")
    assert code == 2 and err.startswith("error:")


def test_environment_overrides_config_and_flags_override_environment(capsys, vault, tmp_path, monkeypatch, puremind_home):
    run(capsys, "init", str(vault))
    other = tmp_path / "envvault"
    write(other, "only-here.md", "# Env\n\nthe environment vault holds the word marmalade\n")
    monkeypatch.setenv("PUREMIND_VAULT", str(other))
    monkeypatch.setenv("PUREMIND_DB", str(tmp_path / "env.sqlite"))
    code, out, err = run(capsys, "index")
    assert code == 0 and "1 added" in out
    code, out, err = run(capsys, "index", str(vault))  # the argument beats the environment...
    assert code == 2 and "built for the vault" in err  # ...and the index refuses to switch vaults silently


def test_the_index_file_is_private(capsys, indexed, puremind_home):
    assert stat.S_IMODE((puremind_home / "index.sqlite").stat().st_mode) == 0o600
    assert stat.S_IMODE(puremind_home.stat().st_mode) == 0o700


def test_demo_indexes_the_sample_vault_and_searches_it(capsys, puremind_home):
    code, out, err = run(capsys, "demo")
    assert code == 0, err
    assert "projects/espresso.md" in out and "Grinder setup" in out
    assert err.count("using keyword search") == 1
    assert not (puremind_home / "index.sqlite").exists(), "the demo must not touch the user's own index"


@pytest.mark.parametrize("value", ["-1", "soon"])
def test_a_bad_rerank_budget_flag_is_one_error_line_and_exit_2(capsys, indexed, value):
    code, out, err = run(capsys, "search", "--rerank-budget", value, "grinder")
    assert code == 2 and out == ""
    assert err.startswith("error:") and "rerank-budget" in err and "Traceback" not in err


def test_a_rerank_budget_flag_is_taken(capsys, indexed):
    code, out, err = run(capsys, "search", "--rerank-budget", "0.5", "--lexical-only", "grinder")
    assert code == 0 and "coffee.md" in out


@pytest.mark.parametrize("command", [("search", "grinder"), ("serve",)])
def test_the_rerank_budget_flag_reaches_the_searcher_of_search_and_serve(capsys, indexed, monkeypatch, command):
    import puremind.server
    import puremind.services

    built = []
    real = puremind.services.make_searcher

    def spy(*args, **kwargs):
        built.append(real(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(puremind.services, "make_searcher", spy)
    served = []
    monkeypatch.setattr(puremind.server, "divert_stdout", lambda: None)  # the test's stdout stays as it is
    monkeypatch.setattr(puremind.server, "_serve_on", lambda wire, tools: served.append(tools))
    code, out, err = run(capsys, command[0], "--rerank-budget", "0.7", *command[1:])
    assert code == 0, err
    assert [s.params.rerank_budget for s in built] == [0.7]
    assert len(served) == (command[0] == "serve")
    for s in built:
        s.close()
