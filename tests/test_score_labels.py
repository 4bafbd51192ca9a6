"""One label per kind of score, the same in `puremind demo`, `puremind search` and the MCP text block (issue 32):
"bm25" for a keyword score (`--lexical-only`), "rrf" for a fusion value (hybrid search, and keyword-only search,
which fuses the keyword lists), "p" for a cross-encoder probability."""

from __future__ import annotations

import re
import shutil

from puremind import cli
from puremind.demo import DEMO_QUERIES, SAMPLE_VAULT
from puremind.results import SCORE_LABELS, Passage, SearchResult, score_meaning, score_text
from puremind.server import render_search

CLI_SCORE = re.compile(r"^\d+\. .*  \(lines \d+-\d+\)  (\S+) (\S+)$")
MCP_SCORE = re.compile(r"^\[\d+\] .*:\d+-\d+  (\S+) (\S+)")


def _result(mode: str, kinds: list[str]) -> SearchResult:
    passages = [Passage(rank=i, path=f"n{i}.md", heading_path=["N"], start_line=1, end_line=2, score=0.5 / i,
                        score_kind=kind, excerpt="text", text="text") for i, kind in enumerate(kinds, 1)]
    reranked = kinds.count("reranked")
    return SearchResult(query="q", mode=mode, score_meaning=score_meaning(mode, reranked, len(kinds)), notes=[],
                        results=passages)


def _labels(lines: list[str], pattern: re.Pattern) -> list[tuple[str, str]]:
    return [m.groups() for m in map(pattern.match, lines) if m]


def test_the_terminal_and_the_mcp_text_label_each_kind_of_score_alike():
    assert SCORE_LABELS == {"lexical": "bm25", "hybrid": "rrf", "reranked": "p"}
    for mode, kinds in [("lexical", ["lexical"] * 2), ("hybrid", ["hybrid"] * 2),
                        ("reranked", ["reranked", "reranked", "hybrid"])]:
        result = _result(mode, kinds)
        expected = [tuple(score_text(p.score_kind, p.score).split()) for p in result.results]
        assert _labels(cli.render_search_lines(result), CLI_SCORE) == expected
        assert _labels(render_search(result).splitlines(), MCP_SCORE) == expected
        assert [label for label, _ in expected] == [SCORE_LABELS[k] for k in kinds]


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_demo_prints_what_puremind_search_prints_for_the_same_notes(capsys, tmp_path):
    code, demo, err = _run(capsys, "demo")
    assert code == 0, err
    vault = tmp_path / "sample"
    shutil.copytree(SAMPLE_VAULT, vault)
    assert _run(capsys, "init", str(vault))[0] == 0 and _run(capsys, "index")[0] == 0
    for query in DEMO_QUERIES:
        command = f"$ puremind search {query!r} --limit 3"
        assert command in demo.splitlines()  # the command the demo says it ran, which the user can run
        code, out, err = _run(capsys, "search", query, "--limit", "3")
        assert code == 0, err
        block = demo.split(command + "\n", 1)[1].split("\n\n", 1)[0]
        assert block == out.rstrip("\n")  # the same lines: the same scores with the same labels
        assert {label for label, _ in _labels(out.splitlines(), CLI_SCORE)} == {"rrf"}  # keyword-only: fused
    code, out, err = _run(capsys, "search", DEMO_QUERIES[0], "--limit", "3", "--lexical-only")
    assert code == 0 and {label for label, _ in _labels(out.splitlines(), CLI_SCORE)} == {"bm25"}
