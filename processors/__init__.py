"""Stream processors: pure logic in ``processors.logic``, thin Faust agents around it."""
