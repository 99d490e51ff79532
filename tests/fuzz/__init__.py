"""Coverage-guided fuzz targets for every decoder entry point, their corpora and the short run (docs/fuzzing.md)."""
