"""Code only the tests share: what no benchmark, the demo or the emulators run (issue 26)."""
