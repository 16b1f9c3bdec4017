"""Data for jaxlab runs: shipped datasets, corpus loaders and grain input pipelines.

``text`` packs byte-level documents (the shipped King James Bible by default, or user files and
Hugging Face datasets via ``corpus``) into language-model batches; ``images`` loads the shipped
MNIST and Fashion-MNIST subsets and scikit-learn's 8×8 digits; ``batching`` is the checkpointable
grain pipeline both use; ``shipped`` locates the files in ``assets/`` (sources and licences in
``assets/PROVENANCE.md``). Submodules are imported on use, so importing this package is cheap.
``captions`` renders image–caption pairs from the shipped images for CLIP-style training.
"""
