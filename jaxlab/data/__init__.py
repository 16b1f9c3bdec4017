"""Data for jaxlab runs: shipped datasets, corpus loaders and grain input pipelines.

``text`` packs byte-level documents (the shipped King James Bible by default, or user files and
Hugging Face datasets via ``corpus``) into language-model batches; ``images`` loads the shipped
MNIST and Fashion-MNIST subsets and scikit-learn's 8×8 digits; ``batching`` is the checkpointable
grain pipeline both use; ``tokenizer`` (bytes, BPE through HF ``tokenizers``), ``sources`` (a
corpus's inputs and its validation split, read alike by both tools), ``prepare``
(``python -m jaxlab.data.prepare``: a corpus into checksummed token shards) and ``shards`` (packed,
checkpointable batches from them, each host reading its rows) are the path for real corpora;
``digits_da`` builds the partial domain-adaptation tasks (sklearn digits, MNIST and Fashion-MNIST
in the 8×8 optdigits format); ``shipped`` locates the files in ``assets/`` (sources and licences in
``assets/PROVENANCE.md``). Submodules are imported on use, so importing this package is cheap.
``captions`` renders image–caption pairs from the shipped images for CLIP-style training.
"""
