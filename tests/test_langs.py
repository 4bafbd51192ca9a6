"""Which scripts a model reads (puremind.langs) and how a search uses it."""

from __future__ import annotations

from pathlib import Path

import pytest

from puremind.errors import ModelError
from puremind.langs import card_languages, normalize_languages, script_counts, script_of, unread_script
from puremind.models.manifest import generic_spec, load_manifest
from test_retrieval import FakeReranker, indexed  # noqa: F401  (indexed is a fixture)


@pytest.mark.parametrize(
    "card, expected",
    [
        ("---\nlanguage: en\nlicense: apache-2.0\n---\n# Model\n", ("en",)),
        ("---\nlicense: mit\nlanguage: [en, de, 'fr']\n---\n", ("en", "de", "fr")),
        ("---\nlanguage:\n- en\n- zh\n\n- ja\ntags:\n- x\n---\n", ("en", "zh", "ja")),
        ("---\nlanguage: multilingual\n---\n", ("multilingual",)),
        ("---\nlanguage: en-US  # comment\n---\n", ("en",)),
        ("---\nlicense: mit\n---\nlanguage: en\n", ()),  # outside the front matter
        ("# Model\n\nlanguage: en\n", ()),  # no front matter
        ("---\nlanguage: en\n", ()),  # front matter never closed
        ("", ()),
    ],
)
def test_card_languages(card, expected):
    assert card_languages(card) == expected


def test_normalize_languages_drops_what_is_not_a_code():
    assert normalize_languages(["EN", "en-GB", "zh_Hant", "not a code", "multilingual", "x"]) == ("en", "zh", "multilingual")


def test_script_of_letters_and_non_letters():
    assert [script_of(c) for c in "a한漢あアж7 ?"] == ["LATIN", "HANGUL", "CJK", "HIRAGANA", "KATAKANA", "CYRILLIC",
                                                      None, None, None]
    assert script_of("Ａ") == "LATIN" and script_of("ｱ") == "KATAKANA"
    assert script_counts("학회 travel 2024") == {"HANGUL": 2, "LATIN": 6}


@pytest.mark.parametrize(
    "languages, query, expected",
    [
        (("en",), "학회 출장 비용 승인 누가 해? travel", "Hangul"),  # 12 Hangul letters, 6 Latin
        (("en",), "京都駅の近くのホテル", "Han"),
        (("en",), "Как дела", "Cyrillic"),
        (("en",), "Wie läuft die Migration?", None),  # Latin script: read
        (("en",), "Postgres 移行 schedule for payments", None),  # mostly Latin
        (("en",), "ab 한국", None),  # half and half: read
        (("en",), "2024-03-01 ???", None),  # no letters
        (("ja",), "how do I rotate keys", "Latin"),
        (("ko", "en"), "서울역 근처 호텔", None),
        (("multilingual",), "학회 출장", None),
        ((), "학회 출장", None),  # nothing declared: reads anything
        (("en", "tlh"), "학회 출장", None),  # a language outside the table: cannot tell, so it reads
    ],
)
def test_unread_script(languages, query, expected):
    assert unread_script(languages, query) == expected


def test_the_pinned_models_are_declared_multilingual():
    manifest = load_manifest()
    assert {spec.languages for spec in manifest} == {("multilingual",)}


def _manifest_with(tmp_path: Path, line: str) -> Path:
    text = load_manifest().path.read_text(encoding="utf-8")
    text = text.replace('languages = ["multilingual"]  # 100+ languages (the model card)', line, 1)
    path = tmp_path / "manifest.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_manifest_languages_are_checked(tmp_path):
    assert load_manifest(_manifest_with(tmp_path, 'languages = ["en", "de-DE"]')).get("qwen3-embedding-0.6b").languages == ("en", "de")
    with pytest.raises(ModelError, match="'english' is neither an ISO 639"):
        load_manifest(_manifest_with(tmp_path, 'languages = ["english"]'))
    with pytest.raises(ModelError, match="languages must be a list"):
        load_manifest(_manifest_with(tmp_path, 'languages = "en"'))


def test_a_generic_model_takes_the_languages_of_its_card(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "bert", "hidden_size": 8, "max_position_embeddings": 64}')
    spec = generic_spec(str(folder), folder, role="embedder", overrides={"pooling": "mean"})
    assert spec.languages == ()
    (folder / "README.md").write_text("---\nlanguage:\n  - en\n---\n# A model\n")
    spec = generic_spec(str(folder), folder, role="embedder", overrides={"pooling": "mean"})
    assert spec.languages == ("en",) and "README.md" in spec.files


# --- the Searcher leaves a model out for a query it cannot read ----------------------------------------------


def test_an_english_only_embedder_is_left_out_for_a_korean_query(indexed, fake_embedder):
    from puremind.retrieval.pipeline import Searcher

    fake_embedder.languages = ("en",)
    s = Searcher(indexed, rerank=False, embedder=fake_embedder)
    before = len(fake_embedder.embedded)
    out = s.search("서울역 근처 호텔", 5)
    assert len(fake_embedder.embedded) == before, "the query must not be embedded"
    assert out.mode == "hybrid" and out.hits[0].path == "korea.md"
    assert out.notes == ["semantic search left out for this query: the model reads en, and most of the query is in "
                         "Hangul script"]
    out = s.search("grinder espresso", 5)
    assert len(fake_embedder.embedded) == before + 1 and out.notes == []
    fake_embedder.languages = ("multilingual",)
    s.search("서울역 근처 호텔", 5)
    assert len(fake_embedder.embedded) == before + 2


def test_a_reranker_that_cannot_read_the_query_is_left_out(indexed, fake_embedder):
    from puremind.retrieval.pipeline import Searcher

    reranker = FakeReranker()
    reranker.languages = ("en",)
    s = Searcher(indexed, embedder=fake_embedder, reranker=reranker)
    out = s.search("京都駅 旅館", 5)
    assert out.mode == "hybrid" and reranker.passages == [] and out.hits[0].path == "japan.md"
    assert any(n.startswith("reranking left out for this query") and "Han script" in n for n in out.notes)
    assert s.search("grinder espresso", 5).mode == "reranked"


def test_the_loader_hands_the_spec_languages_to_the_model(monkeypatch, tmp_path):
    from puremind.models import loader

    class Spec:
        languages = ("en",)

    resolved = loader.Resolved(spec=Spec(), revision="r", source=None)

    class Model:
        pass

    assert loader._with_languages(Model(), resolved).languages == ("en",)
