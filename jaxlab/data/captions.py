"""Image–caption pairs rendered from the shipped MNIST and Fashion-MNIST, for CLIP-style training.

Each pair puts one object (a digit or a garment, 20 classes) on a 32×32 RGB canvas with sampled
attributes — colour tint (7), size (small 14 px / large 20 px), horizontal position (left / right),
and, with probability ``second_prob``, a second small object of another class and colour on the
other side — and writes a caption from one of several templates over a small word vocabulary
(:data:`VOCAB`), so captions carry more than the class. A fraction ``noise`` of the pairs gets the
caption of another pair (the mismatched pairs of web data). Held-out evaluation uses the *test*
images, and one attribute combination (:data:`HELD_OUT`: a red primary object on the right) never
appears in training but is rendered for evaluation. :func:`zero_shot_prompts` gives prompt
templates per class for zero-shot classification; :func:`zero_shot_accuracy` and
:func:`recall_at_k` score embeddings. Everything is a seeded numpy function; nothing is downloaded.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from jaxtyping import Float, Int, UInt8

from jaxlab.core.errors import ConfigError
from jaxlab.data.images import load_fashion_mnist, load_mnist

__all__ = [
    "CLASS_NAMES",
    "HELD_OUT",
    "SEQ_LEN",
    "VOCAB",
    "CaptionPairs",
    "make_caption_pairs",
    "recall_at_k",
    "tokenize",
    "zero_shot_accuracy",
    "zero_shot_prompts",
]

CANVAS = 32
SEQ_LEN = 16  # caption tokens, padded with 0
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
GARMENTS = ("t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker")
GARMENTS += ("bag", "boot")
CLASS_NAMES = DIGITS + GARMENTS  # class k < 10: MNIST digit k; k >= 10: Fashion-MNIST k - 10
COLOURS = {
    "red": (1.0, 0.15, 0.1),
    "green": (0.1, 0.9, 0.2),
    "blue": (0.15, 0.3, 1.0),
    "yellow": (1.0, 0.9, 0.1),
    "cyan": (0.1, 0.9, 0.9),
    "magenta": (0.9, 0.1, 0.9),
    "white": (1.0, 1.0, 1.0),
}
SIZES = {"small": 14, "large": 20}
POSITIONS = ("left", "right")
HELD_OUT = ("red", "right")  # (colour, position) of the primary object never seen in training
TEMPLATES = (
    "a {size} {colour} {name} on the {pos}",
    "a photo of a {colour} {name} , {size} , {pos}",
    "{pos} : a {size} {name} in {colour}",
)
SECOND = " with a {colour} {name}"
PROMPTS = ("a {name}", "a photo of a {name}", "a picture of the {name}")

_WORDS = {w for t in TEMPLATES + PROMPTS + (SECOND,) for w in t.split() if "{" not in w}
_WORDS |= set(CLASS_NAMES) | set(COLOURS) | set(SIZES) | set(POSITIONS)
VOCAB = ("<pad>", "<eos>", *sorted(_WORDS))
_INDEX = {w: i for i, w in enumerate(VOCAB)}


class CaptionPairs(NamedTuple):
    """Rendered pairs: images uint8 ``(N, 32, 32, 3)``, tokens int32 ``(N, SEQ_LEN)``, and the
    primary object's class, colour index and position index; ``matched`` is False for noise."""

    images: UInt8[np.ndarray, "N 32 32 3"]
    tokens: Int[np.ndarray, "N T"]
    labels: Int[np.ndarray, " N"]
    colours: Int[np.ndarray, " N"]
    positions: Int[np.ndarray, " N"]
    matched: np.ndarray


def tokenize(captions: list[str]) -> Int[np.ndarray, "N T"]:
    """Word-level tokens (:data:`VOCAB`) ending in ``<eos>`` (the text tower's readout position,
    as CLIP's EOT token), padded with 0 to :data:`SEQ_LEN`."""
    out = np.zeros((len(captions), SEQ_LEN), np.int32)
    for row, caption in enumerate(captions):
        words = [*caption.split(), "<eos>"]
        unknown = [w for w in words if w not in _INDEX]
        if unknown or len(words) > SEQ_LEN:
            raise ConfigError(f"caption {caption!r} has unknown words {unknown} or is too long")
        out[row, : len(words)] = [_INDEX[w] for w in words]
    return out


@functools.lru_cache(maxsize=2)
def _sources(split: str) -> tuple[np.ndarray, np.ndarray]:
    mi, ml = load_mnist(split)
    fi, fl = load_fashion_mnist(split)
    return np.concatenate([mi, fi]), np.concatenate([ml, fl + 10])


def _resize(image: np.ndarray, size: int) -> np.ndarray:
    idx = (np.arange(size) * 28) // size  # nearest neighbour: enough for 28 → 14 / 20 px
    return image[np.ix_(idx, idx)]


def _paste(canvas: np.ndarray, obj: np.ndarray, colour: str, x: int, y: int) -> None:
    tinted = obj[..., None].astype(np.float32) / 255.0 * np.float32(COLOURS[colour])
    h = obj.shape[0]
    np.maximum(canvas[y : y + h, x : x + h], tinted, out=canvas[y : y + h, x : x + h])


def make_caption_pairs(
    split: str,
    num_pairs: int,
    *,
    seed: int,
    noise: float = 0.0,
    second_prob: float = 0.5,
    mention: float = 1.0,
    held_out: str = "exclude",
) -> CaptionPairs:
    """Renders ``num_pairs`` seeded image–caption pairs from the ``split`` images.

    Args:
      split: ``"train"`` or ``"test"`` (held-out images).
      num_pairs: number of pairs (images are drawn with replacement, attributes afresh).
      seed: everything is a function of it.
      noise: fraction of pairs whose caption is another pair's (0 for clean data).
      second_prob: probability of a second object.
      mention: probability that a caption names each attribute (size, colour, position, the
        second object's colour); the class is always named. Below 1, the captions are partial
        like web alt-text and the class is the one word every caption of an image shares.
      held_out: ``"exclude"`` never renders the :data:`HELD_OUT` combination, ``"only"`` renders
        only it (the held-out evaluation), ``"allow"`` samples freely.

    Returns:
      The pairs.
    """
    if num_pairs < 1 or not all(0 <= v <= 1 for v in (noise, second_prob, mention)):
        raise ConfigError(
            f"need num_pairs >= 1 and noise, second_prob, mention in [0, 1]; got {num_pairs}, "
            f"{noise}, {second_prob}, {mention}"
        )
    if held_out not in ("exclude", "only", "allow"):
        raise ConfigError(f"held_out must be 'exclude', 'only' or 'allow', got {held_out!r}")
    rng = np.random.default_rng(seed)
    src, src_labels = _sources(split)
    colour_names, size_names = list(COLOURS), list(SIZES)
    images = np.zeros((num_pairs, CANVAS, CANVAS, 3), np.float32)
    captions, labels, colours, positions = [], [], [], []
    for n in range(num_pairs):
        k = rng.integers(len(src))
        colour, pos = colour_names[rng.integers(7)], int(rng.integers(2))
        if held_out == "only":
            colour, pos = HELD_OUT[0], POSITIONS.index(HELD_OUT[1])
        while held_out == "exclude" and (colour, POSITIONS[pos]) == HELD_OUT:
            colour, pos = colour_names[rng.integers(7)], int(rng.integers(2))
        size = size_names[rng.integers(2)]
        px = SIZES[size]
        x = 0 if pos == 0 else CANVAS - px
        _paste(images[n], _resize(src[k], px), colour, x, int(rng.integers(CANVAS - px + 1)))
        named = rng.random(4) < mention  # size, colour, position, second colour
        text = _caption(
            TEMPLATES[rng.integers(len(TEMPLATES))],
            size=size if named[0] else None,
            colour=colour if named[1] else None,
            name=CLASS_NAMES[src_labels[k]],
            pos=POSITIONS[pos] if named[2] else None,
        )
        if rng.random() < second_prob:
            k2 = rng.integers(len(src))
            while src_labels[k2] == src_labels[k]:
                k2 = rng.integers(len(src))
            c2 = colour_names[rng.integers(7)]
            x2 = CANVAS - 14 if pos == 0 else 0
            _paste(images[n], _resize(src[k2], 14), c2, x2, int(rng.integers(CANVAS - 13)))
            text += SECOND.format(colour=c2, name=CLASS_NAMES[src_labels[k2]])
            if not named[3]:
                text = text.replace(f" with a {c2} ", " with a ")
        captions.append(text)
        labels.append(src_labels[k])
        colours.append(colour_names.index(colour))
        positions.append(pos)
    tokens = tokenize(captions)
    matched = np.ones(num_pairs, bool)
    noisy = np.flatnonzero(rng.random(num_pairs) < noise)
    if len(noisy) > 1:
        # A cyclic shift within the noisy rows: every one of them gets another pair's caption.
        tokens[noisy] = tokens[np.roll(noisy, 1)]
        matched[noisy] = False
    return CaptionPairs(
        (images * 255).round().astype(np.uint8),
        tokens,
        np.asarray(labels, np.int32),
        np.asarray(colours, np.int32),
        np.asarray(positions, np.int32),
        matched,
    )


def _caption(template: str, *, name: str, size, colour, pos) -> str:
    """``template`` filled in, with the words of every attribute given as None left out."""
    parts = {
        "{size}": [size] if size else [],
        "{colour}": [colour] if colour else [],
        "{pos}": [pos] if pos else [],
        "{name}": [name],
    }
    words = template.split()
    out: list[str] = []
    for i, w in enumerate(words):
        if w in parts:
            out += parts[w]
        elif w in (",", ":", "on", "the", "in") and _drops(words, i, parts):
            continue  # the glue of a left-out attribute ("on the {pos}", ", {size}", "in {c}")
        else:
            out.append(w)
    return " ".join(out)


def _drops(words: list[str], i: int, parts: dict) -> bool:
    """Whether glue word ``words[i]`` belongs to a left-out attribute (the next slot, or for
    ``:`` the slot before it)."""
    if words[i] == ":":
        return not parts[words[i - 1]]
    nxt = next(w for w in words[i + 1 :] if w not in ("on", "the", "in"))
    return nxt in parts and not parts[nxt]


def zero_shot_prompts(ensemble: bool = True) -> Int[np.ndarray, "L P T"]:
    """Tokens of every prompt for every class: ``(classes, prompts, SEQ_LEN)``.

    With ``ensemble`` (the default), CLIP's prompt ensembling (Radford et al. 2021, Sec. 3.1.4)
    over the caption templates with every colour, size and position filled in, so the class
    embedding marginalises the attributes; otherwise only the bare :data:`PROMPTS`.
    """
    if not ensemble:
        return np.stack([tokenize([p.format(name=n) for p in PROMPTS]) for n in CLASS_NAMES])
    fills = [
        t.format(size=size, colour=colour, name="{name}", pos=pos)
        for t in TEMPLATES
        for colour in COLOURS
        for size in SIZES
        for pos in POSITIONS
    ]
    return np.stack([tokenize([f.format(name=n) for f in fills]) for n in CLASS_NAMES])


def zero_shot_accuracy(
    image_emb_ND: Float[np.ndarray, "N D"],
    prompt_emb_LPD: Float[np.ndarray, "L P D"],
    labels_N: Int[np.ndarray, " N"],
) -> float:
    """CLIP zero-shot accuracy: each class embedding is the normalised mean over its templates."""
    cls_LD = np.asarray(prompt_emb_LPD, np.float64).mean(1)
    cls_LD /= np.linalg.norm(cls_LD, axis=1, keepdims=True)
    pred = np.argmax(np.asarray(image_emb_ND, np.float64) @ cls_LD.T, axis=1)
    return float(np.mean(pred == labels_N))


def recall_at_k(
    image_emb_ND: Float[np.ndarray, "N D"], text_emb_ND: Float[np.ndarray, "N D"], k: int = 1
) -> dict[str, float]:
    """Image→text and text→image recall@k of matched rows (pair i is image i with text i)."""
    s_NN = np.asarray(image_emb_ND, np.float64) @ np.asarray(text_emb_ND, np.float64).T
    n = len(s_NN)
    if k < 1 or k > n:
        raise ConfigError(f"recall@k needs 1 <= k <= {n}, got {k}")

    def recall(s):
        # rank of the true match: how many candidates score strictly higher
        rank = np.sum(s > np.diagonal(s)[:, None], axis=1)
        return float(np.mean(rank < k))

    return {"image_to_text": recall(s_NN), "text_to_image": recall(s_NN.T)}
