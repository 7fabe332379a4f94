"""One pytest session: the fixture, the session that measures and judges, refresh processes, outputs."""
