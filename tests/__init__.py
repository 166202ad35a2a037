"""Tests are a package: modules import helpers as tests.<module>, never by bare name."""
