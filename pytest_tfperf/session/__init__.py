"""One pytest session: the fixture, the session that measures and judges, partner and refresh processes, outputs."""
