"""Rendered caption pairs: seeded, captions that name the rendered attributes, noise, held-out
combination, and the zero-shot / recall metrics against hand-made embeddings."""

import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.data import captions as C

INV = dict(enumerate(C.VOCAB))


def _words(tokens):
    return [INV[t] for t in tokens if t]


@pytest.fixture(scope="module")
def pairs():
    return C.make_caption_pairs("train", 300, seed=3, noise=0.2)


def test_seeded_and_shaped(pairs):
    again = C.make_caption_pairs("train", 300, seed=3, noise=0.2)
    for a, b in zip(pairs, again, strict=True):
        np.testing.assert_array_equal(a, b)
    other = C.make_caption_pairs("train", 300, seed=4, noise=0.2)
    assert not np.array_equal(pairs.images, other.images)
    assert pairs.images.shape == (300, 32, 32, 3) and pairs.images.dtype == np.uint8
    assert pairs.tokens.shape == (300, C.SEQ_LEN)


def test_matched_captions_name_the_rendered_attributes(pairs):
    colours = list(C.COLOURS)
    for i in np.flatnonzero(pairs.matched)[:100]:
        words = _words(pairs.tokens[i])
        assert C.CLASS_NAMES[pairs.labels[i]] in words
        assert colours[pairs.colours[i]] in words
        assert C.POSITIONS[pairs.positions[i]] in words
        # the primary object is drawn in its tint: its colour's strongest channel carries ink
        img = pairs.images[i].astype(float)
        half = img[:, :12] if pairs.positions[i] == 0 else img[:, 20:]
        assert half[..., int(np.argmax(C.COLOURS[colours[pairs.colours[i]]]))].sum() > 0


def test_noise_fraction_and_mismatch(pairs):
    clean = C.make_caption_pairs("train", 300, seed=3, noise=0.0)
    assert clean.matched.all()
    frac = 1 - pairs.matched.mean()
    assert 0.1 < frac < 0.3
    noisy = ~pairs.matched
    np.testing.assert_array_equal(pairs.tokens[~noisy], clean.tokens[~noisy])
    assert np.mean(np.any(pairs.tokens[noisy] != clean.tokens[noisy], axis=1)) > 0.9


def test_held_out_combination(pairs):
    red, right = list(C.COLOURS).index(C.HELD_OUT[0]), C.POSITIONS.index(C.HELD_OUT[1])
    train = C.make_caption_pairs("train", 400, seed=0)
    assert not np.any((train.colours == red) & (train.positions == right))
    held = C.make_caption_pairs("test", 50, seed=0, held_out="only")
    assert np.all((held.colours == red) & (held.positions == right))
    with pytest.raises(ConfigError, match="held_out"):
        C.make_caption_pairs("test", 5, seed=0, held_out="never")


def test_zero_shot_prompts_and_metrics():
    bare = C.zero_shot_prompts(ensemble=False)
    assert bare.shape == (len(C.CLASS_NAMES), len(C.PROMPTS), C.SEQ_LEN)
    assert _words(bare[19, 0]) == ["a", "boot", "<eos>"]
    prompts = C.zero_shot_prompts()
    assert prompts.shape[:2] == (len(C.CLASS_NAMES), len(C.TEMPLATES) * 7 * 2 * 2)
    assert all("boot" in _words(p) for p in prompts[19])
    rng = np.random.default_rng(0)
    cls = rng.normal(size=(20, 8))
    prompt_emb = cls[:, None, :] + 0.01 * rng.normal(size=(20, 3, 8))
    labels = rng.integers(20, size=50)
    assert C.zero_shot_accuracy(cls[labels], prompt_emb, labels) == 1.0
    assert C.zero_shot_accuracy(cls[labels], prompt_emb, (labels + 1) % 20) == 0.0
    x = rng.normal(size=(30, 8))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    r = C.recall_at_k(x, x, k=1)
    assert r == {"image_to_text": 1.0, "text_to_image": 1.0}
    r = C.recall_at_k(x, np.roll(x, 1, axis=0), k=1)
    assert r["image_to_text"] < 0.2
    # recall@k against a brute-force count with numpy argsort
    y = rng.normal(size=(30, 8))
    s = x @ y.T
    want = np.mean([i in np.argsort(-s[i])[:5] for i in range(30)])
    assert C.recall_at_k(x, y, k=5)["image_to_text"] == pytest.approx(want)


def test_bad_arguments():
    with pytest.raises(ConfigError):
        C.make_caption_pairs("train", 10, seed=0, noise=1.5)
    with pytest.raises(ConfigError, match="unknown words"):
        C.tokenize(["a purple cat"])


def test_partial_captions_always_name_the_class():
    full = C.make_caption_pairs("train", 200, seed=5)
    part = C.make_caption_pairs("train", 200, seed=5, mention=0.3)
    np.testing.assert_array_equal(part.images, full.images)  # the same rendered images
    colours, named = list(C.COLOURS), []
    for i in range(200):
        words = _words(part.tokens[i])
        assert C.CLASS_NAMES[part.labels[i]] in words and words[-1] == "<eos>"
        named.append(colours[part.colours[i]] in words)
        # no glue left behind by a dropped attribute
        assert not any(a == b for a, b in zip(words, words[1:], strict=False))
        assert words[0] != ":" and "on the <eos>" not in " ".join(words)
    assert 0.15 < np.mean(named) < 0.5  # the primary colour named about 30% of the time
    assert np.mean(np.sum(part.tokens != 0, 1)) < np.mean(np.sum(full.tokens != 0, 1))
    none = C.make_caption_pairs("train", 20, seed=5, mention=0.0, second_prob=0.0)
    assert {tuple(_words(t)[:-2]) for t in none.tokens} <= {("a",), ("a", "photo", "of", "a")}
    with pytest.raises(ConfigError, match="mention"):
        C.make_caption_pairs("train", 5, seed=0, mention=1.5)
