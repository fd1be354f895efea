"""The real plane's build: the pins (`pins.toml`, read by `pins`), our Go modules (`go/`), and the
build into a cache keyed by them (`build`; `python -m realplane.build`)."""
