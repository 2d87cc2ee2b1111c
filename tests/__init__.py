"""pipepool's tests. A package, and each room under it one, so a test module imports as
``tests.ROOM.NAME``: the name a spawn or forkserver worker imports to unpickle a function
defined there, and file names need be unique only within their room (pyproject.toml)."""
