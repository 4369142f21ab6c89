"""Input boundaries: every value a user can type, link or upload is parsed here before any
library computes with it.

- :mod:`inputs.errors`: :class:`InputError`, the one error type that names the offending field.
- :mod:`inputs.bounds`: :class:`Bound`, a number's allowed range, used by CLIs, URL state and
  libraries alike, so a range is written once.
- :mod:`inputs.cli`: argparse plumbing shared by every CLI (bounded types, one-line errors,
  exit status 2).
- :mod:`inputs.uploads`: uploaded or path-given files as bytes with a size cap, JSON with a
  depth limit, strict JSON out.

This package imports nothing of the project: every library may depend on it.
"""
