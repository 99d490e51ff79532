"""Tests for inventory, longest-prefix match, app categories and flow enrichment."""
