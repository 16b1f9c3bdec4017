"""Reusable NNX layers with explicit arguments: linear maps (dense and structured), the spectral
layer, initialisation rules, norms, MLP, embeddings and the attention dispatch.

Layers only: ``nn`` imports nothing above :mod:`jaxlab.core` (``tests/test_layout.py`` checks it).
The language-model machinery built from these layers (the config every LM shares, the baseline
Transformer, the language-modelling Task, generation and caches) lives in :mod:`jaxlab.lm`.

Shape letters. Inside model and kernel code a tensor's name ends in its shape, one letter per
axis in order (Shazeer, "Shape Suffixes: Good Coding Style", 2024): ``x_BTD`` is a batch of
sequences of model-width vectors, ``logits_BHTS`` a batch of per-head query-by-key scores. A
digit is a literal size (``m_T1``, ``qkv_BT3RE``, ``pre_BT4HE``). Public functions carry the same
letters in their jaxtyping annotations (``Float[Array, "B T D"]``). Each letter has one meaning
everywhere, given here and in ``docs/glossary.md``; ``tests/test_shape_letters.py`` checks every
suffix and annotation against this table:

======  ==========================================================================================
Letter  Meaning
======  ==========================================================================================
B       batch: the examples processed together
C       chunk: the positions of one chunk of a sequence, beside the whole (chunked loss, scan, keys)
D       model width: the features of a token's or an example's vector (d_model, embeddings, inputs)
E       head width: the features of one head's vectors; its values' where M differs (Dv)
F       hidden width: the inner features of an MLP or a projected block (d_ff, xLSTM's v_dim)
G       group: the query heads that share one key/value head (H = K G)
H       heads: attention or recurrent heads (the query heads under grouped-query attention)
I       block input: the input features of a linear map, or of one of its blocks (d_in)
J       blocks: the input-side blocks of a block-structured map (BTT's n1, an MLR level's blocks)
K       key/value heads of grouped-query attention
L       labels: the classes of a classifier
M       key width: the features of one head's queries and keys where they differ from E (Dk)
N       items: a count of things not named here (examples of a set, candidates, chunks, steps)
O       block output: the output features of a linear map, or of one of its blocks (d_out)
P       prompts: the prompt templates of each class of a zero-shot classifier
Q       queries: query positions where they differ from T (the last few scored, a region's)
R       rank: the inner width of a factorised map (low rank, MLR, BTT's TT rank, RMT's R)
S       keys: key and value positions where they differ from T (a cache, a key tile, a state's)
T       positions: the time steps of a sequence; in a kernel, the tile of them it holds
U       output blocks: the output-side blocks of a BTT map (m2)
V       vocabulary
X       leading axes: any number of batch-like axes, flattened or not (a matmul's rows)
Z       reference width: the embedding width of DrRho's frozen reference model
======  ==========================================================================================

Lowercase letters are the symbols of the paper a module follows; each holds only in the modules
listed (under ``jaxlab``):

======  ====================================  ================================================
Symbol  Meaning                               Where
======  ====================================  ================================================
n       points of the first marginal (a)      ot, methods.qn_ot, data.ot_problems
m       points of the second marginal (b)     ot, methods.qn_ot, data.ot_problems
k       dual unknowns, n + m - 1              ot, methods.qn_ot
p       entries of a flattened plan block     methods.qn_ot
s       entries sampled from them             methods.qn_ot
m       outputs of the regression Y = W X     methods.nard, data.nard_synthetic
d       features of the regression inputs     methods.nard, data.nard_synthetic
p       slots of the active set (max_active)  methods.nard
q       columns of the new support            methods.nard
d       features of the regression inputs     methods.structured_attention
k       singular-value pairs a layer stores   nn.spectral, methods.sst
b       the sub-batch JEST keeps of B         methods.drrho_clip
======  ====================================  ================================================

Longer names in annotations:

==========  ==========================================================================
Name        Meaning
==========  ==========================================================================
d_in        I of a whole linear map
d_out       O of a whole linear map
batch       X, as the variadic ``*batch``
T1          T + 1 (a row's tokens and its next-token targets)
Ns          N of the source domain
Nt          N of the target domain
m1          m - 1 (the second marginal without its gauge-fixed point)
cap         capacity of a compacted index list
iters       iterations of a solver's trace
height      pixel rows of an image
width       pixel columns of an image
channels    colour channels of an image
==========  ==========================================================================
"""
