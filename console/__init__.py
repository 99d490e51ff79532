"""The web console: matrix, topology, jobs, events and top-N views over the live topics and the archive.

Start it with ``fabricflow console`` or :class:`console.server.ConsoleServer`; docs/console.md.
"""
