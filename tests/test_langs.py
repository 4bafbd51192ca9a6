"""Which scripts a model reads (puremind.langs) and how a search uses it."""

from __future__ import annotations

from pathlib import Path

import pytest

from puremind.errors import ModelError
from puremind.langs import card_languages, normalize_languages, script_counts, script_of, unread_script
from puremind.models.folder_spec import generic_spec
from puremind.models.manifest import load_manifest
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
    from conftest import searcher_with

    fake_embedder.languages = ("en",)
    s = searcher_with(indexed, rerank=False, embedder=fake_embedder)
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


def test_an_english_only_embedder_reads_the_english_words_of_a_korean_query(indexed, fake_embedder):
    from conftest import searcher_with

    from puremind.langs import readable_words
    from puremind.models.lazy import Models
    from puremind.retrieval.pipeline import RetrievalParams, Searcher

    assert readable_words(("en",), "화상회의가 사내망 안 거치는 이유 VPN") == ("VPN", "Hangul")
    assert readable_words(("en",), "이 명령은 `chromium`의 별칭입니다.") == ("", "Hangul")  # half in Hangul: not read
    assert readable_words(("en",), "¿Cómo se configura el molinillo?") == ("", None)  # one script: nothing to split
    assert readable_words(("multilingual",), "서울역 VPN") == ("", None) == readable_words((), "서울역 VPN")
    fake_embedder.languages = ("en",)
    s = searcher_with(indexed, rerank=False, embedder=fake_embedder)
    before = len(fake_embedder.embedded)
    out = s.search("서울역 근처 호텔 espresso", 5)
    assert fake_embedder.embedded[before:] == ["espresso"], out.notes  # the Korean words are not embedded
    assert out.notes == ["semantic search read only 'espresso' of this query: the model reads en, and the rest of "
                         "the query is in Hangul script"]
    assert out.hits[0].path == "korea.md"  # the Korean words still lead through the keyword and character lists
    out = s.search("서울역 근처 호텔 a", 5)  # one letter is not a word to embed
    assert len(fake_embedder.embedded) == before + 1 and out.notes[0].startswith("semantic search left out")
    s.close()
    no_part = Searcher(indexed.db, Models.given(fake_embedder), RetrievalParams(rerank=False, readable_part=False))
    try:
        assert no_part.search("서울역 근처 호텔 espresso", 5).notes[0].startswith("semantic search left out")
    finally:
        no_part.close()
    assert len(fake_embedder.embedded) == before + 1


@pytest.mark.parametrize(("languages", "query", "pair_weight"), [
    (("multilingual",), "서울역 근처 호텔", 0.5),  # reads the whole query, Hangul too: the pairs are a second voice
    ((), "서울역 근처 호텔", 0.5),  # no languages declared: reads anything
    (("ko",), "서울역 근처 호텔 VPN", 0.5),  # a Korean model reads its Hangul
    (("en",), "서울역 근처 호텔", 1.0),  # left out: the pairs are the main voice
    (("en",), "서울역 근처 호텔 espresso", 1.0),  # reads 'espresso' only
    (("en",), "grinder espresso 호텔", 1.0),  # embedded whole, but the model does not read the Hangul word
])
def test_the_pair_list_weighs_less_only_where_the_embedder_reads_its_script(indexed, fake_embedder, monkeypatch,
                                                                           languages, query, pair_weight):
    from conftest import searcher_with

    fake_embedder.languages = languages
    weights = _list_weights(monkeypatch, searcher_with(indexed, rerank=False, embedder=fake_embedder), query)
    # keyword list 1.0, then the pair list, then (two words or more) the all-words list 1.5
    assert weights[:2] == [1.0, pair_weight], weights


def _list_weights(monkeypatch, searcher, query: str) -> list[float]:
    """The weight of each keyword-side list (keyword, pairs, all words) the fusion got for `query`, in order;
    closes `searcher`."""
    from puremind.retrieval import pipeline

    weights: list[float] = []
    real = pipeline._bm25_ranking

    def spy(hits, weight):
        weights.append(weight)
        return real(hits, weight)

    monkeypatch.setattr(pipeline, "_bm25_ranking", spy)
    try:
        searcher.search(query, 5)
    finally:
        searcher.close()
    return weights


def test_gram_coverage_is_the_best_share_of_the_query_grams_one_passage_holds():
    import unicodedata

    from puremind.retrieval.pipeline import _gram_coverage
    from puremind.store import Hit

    def hit(text):
        return Hit(chunk_id=1, path="n.md", heading_path=(), start_line=1, end_line=1, score=1.0, text=text,
                   excerpt=text)

    # 서울역: grams 서 울 역 서울 울역 (5); "서울" holds 서 울 서울 (3 of 5)
    assert _gram_coverage("서울역", [hit("서울 가는 길"), hit("전혀 다른 글")]) == pytest.approx(3 / 5)
    assert _gram_coverage("서울역", [hit("전혀 다른 글"), hit("서울역 앞")]) == 1.0  # the best of the first 3
    assert _gram_coverage("서울역", [hit("a"), hit("b"), hit("c"), hit("서울역")]) == 0.0  # the 4th is not read
    # a note saved in NFD (decomposed Hangul, as macOS writes names) still holds the query's grams
    assert _gram_coverage("서울역", [hit(unicodedata.normalize("NFD", "서울역 앞"))]) == 1.0
    assert _gram_coverage("서울역", []) == 1.0 == _gram_coverage("espresso", [hit("espresso")])  # nothing to judge


@pytest.mark.parametrize(("query", "power", "pair_weight"), [
    ("서울역 근처 호텔", 2.0, 0.5),  # the note holds every gram of the question: the pairs keep their weight
    ("서울역 근처 호텔", 0.0, 0.5),
    # 역 근처에서 가까운 식당: 16 grams (characters and pairs), of which the note "서울역 근처 호텔에 묵었다" holds
    # 역 근 처 에 서 근처 (6): 0.5 * (6/16)^2
    ("역 근처에서 가까운 식당", 2.0, 0.5 * (6 / 16) ** 2),
    ("역 근처에서 가까운 식당", 0.0, 0.5),  # off
])
def test_the_pair_list_weighs_what_its_best_passages_hold_of_the_question(indexed, fake_embedder, monkeypatch,
                                                                          query, power, pair_weight):
    from puremind.models.lazy import Models
    from puremind.retrieval.pipeline import RetrievalParams, Searcher

    fake_embedder.languages = ("multilingual",)
    params = RetrievalParams(rerank=False, pair_coverage_power=power)
    searcher = Searcher(indexed.db, Models.given(fake_embedder), params)
    weights = _list_weights(monkeypatch, searcher, query)
    assert weights[1] == pytest.approx(pair_weight), weights


def test_minority_words_are_the_words_outside_the_main_script():
    from puremind.langs import minority_words

    assert minority_words("화상회의가 사내망 안 거치는 이유 VPN") == "VPN"
    assert minority_words("Orchard VPN split 터널링") == "터널링"
    assert minority_words("이 명령은 `chromium`의 별칭입니다.") == ""  # the English word is glued to Hangul
    assert minority_words("grinder espresso 2024") == "" == minority_words("¿Cómo se configura el molinillo?")


@pytest.mark.parametrize(("languages", "query", "embedded"), [
    # read whole: the words outside the main script are embedded alone too, a second dense list
    (("multilingual",), "서울역 근처 호텔 VPN", ["서울역 근처 호텔 VPN", "VPN"]),
    # the main script is the one most letters are in: 8 Latin letters to 7 Hangul syllables
    (("multilingual",), "서울역 근처 호텔 espresso", ["서울역 근처 호텔 espresso", "서울역 근처 호텔"]),
    (("multilingual",), "grinder espresso 호텔", ["grinder espresso 호텔", "호텔"]),
    (("multilingual",), "grinder espresso", ["grinder espresso"]),  # one script
    (("multilingual",), "서울역 근처 호텔 a", ["서울역 근처 호텔 a"]),  # one letter is no word to embed
    (("en",), "grinder espresso 호텔", ["grinder espresso 호텔"]),  # the model does not read the Hangul word
    (("en",), "서울역 근처 호텔 espresso", ["espresso"]),  # left out: it embeds the words it reads instead
])
def test_a_mixed_script_query_read_whole_embeds_its_other_script_words_alone_too(indexed, fake_embedder, monkeypatch,
                                                                                  languages, query, embedded):
    from conftest import searcher_with

    from puremind.retrieval import dense

    asked: list[int] = []
    real = dense.DenseIndex.search

    def spy(self, query, top):
        found = real(self, query, top)
        asked.append(len(found))
        return found

    monkeypatch.setattr(dense.DenseIndex, "search", spy)
    fake_embedder.languages = languages
    s = searcher_with(indexed, rerank=False, embedder=fake_embedder)
    before = len(fake_embedder.embedded)
    try:
        s.search(query, 5)
    finally:
        s.close()
    assert fake_embedder.embedded[before:] == embedded
    assert len(asked) == len(embedded) and all(asked)  # one dense list per text embedded


@pytest.mark.parametrize(("query", "language"), [
    ("Quiero saber cómo se configura el molinillo para hacer un buen café", "Spanish (es)"),
    ("Wie stelle ich die Mühle für einen Espresso richtig ein?", "German (de)"),
    ("Làm thế nào để điều chỉnh máy xay cà phê cho espresso?", "Vietnamese (vi)"),
])
def test_an_english_only_embedder_is_left_out_for_a_question_in_another_latin_script_language(
        indexed, fake_embedder, query, language):
    from conftest import searcher_with

    fake_embedder.languages = ("en",)
    s = searcher_with(indexed, rerank=False, embedder=fake_embedder)
    before = len(fake_embedder.embedded)
    out = s.search(query, 5)
    assert len(fake_embedder.embedded) == before, "the query must not be embedded"
    assert out.notes == [f"semantic search left out for this query: the model reads en, and the query is in {language}"]
    fake_embedder.languages = ("en", language[-3:-1])  # a model that reads it is asked
    assert s.search(query, 5).notes == [] and len(fake_embedder.embedded) == before + 1


@pytest.mark.parametrize("query", ["grinder espresso", "tar", "1.1.5", "How do I roll back the deploy?",
                                   "kubectl rollout undo"])
def test_english_questions_and_short_keyword_queries_keep_an_english_embedder(indexed, fake_embedder, query):
    from conftest import searcher_with

    fake_embedder.languages = ("en",)
    s = searcher_with(indexed, rerank=False, embedder=fake_embedder)
    before = len(fake_embedder.embedded)
    assert s.search(query, 5).notes == []
    assert len(fake_embedder.embedded) == before + 1


def test_the_language_identifier_ships_its_model_and_is_sure_of_plain_sentences():
    from puremind.langs import identify_language, unread_language

    assert identify_language("Das ist ein ganz normaler deutscher Satz über Kaffee.")[0] == "de"
    assert unread_language(("multilingual",), "Das ist ein ganz normaler deutscher Satz.") is None
    assert unread_language((), "Das ist ein ganz normaler deutscher Satz.") is None
    assert unread_language(("en",), "???") is None


def test_a_reranker_that_cannot_read_the_query_is_left_out(indexed, fake_embedder):
    from conftest import searcher_with

    reranker = FakeReranker()
    reranker.languages = ("en",)
    s = searcher_with(indexed, embedder=fake_embedder, reranker=reranker)
    out = s.search("京都駅 旅館", 5)
    assert out.mode == "hybrid" and reranker.passages == [] and out.hits[0].path == "japan.md"
    assert any(n.startswith("reranking left out for this query") and "Han script" in n for n in out.notes)
    assert s.search("grinder espresso", 5).mode == "reranked"


def test_the_loader_hands_the_spec_languages_to_the_model(tmp_path):
    """The manifest's languages reach the model through its constructor (the export is handed in by `obtain`)."""
    from puremind.models import loader, onnx_backend
    from puremind.models.manifest import load_manifest

    seen: dict = {}

    class Recording(onnx_backend.OnnxEmbedder):
        def __init__(self, folder, **kw):
            seen.update(kw)

    choice = loader.ModelChoice("embedder", "Qwen/Qwen3-Embedding-0.6B", tmp_path, device="cpu", variant="int8")
    real, onnx_backend.OnnxEmbedder = onnx_backend.OnnxEmbedder, Recording
    try:
        loader.load_embedder(choice, obtain=lambda choice, resolved, variant, progress: tmp_path)
    finally:
        onnx_backend.OnnxEmbedder = real
    spec = load_manifest().by_hub_id("Qwen/Qwen3-Embedding-0.6B")
    assert spec.languages and seen["languages"] == spec.languages and seen["precision"] == "int8"
