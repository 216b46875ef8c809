"""`python -m nmt` is the same as the `nmt` console script."""

from nmt.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
