"""One package per paper; each has a README with what is implemented and the results measured."""
