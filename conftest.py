"""Repository-wide pytest configuration.

``pytester`` lets the plugin's own tests run pytest sessions in a temporary
directory, the way a user would.
"""

pytest_plugins = ["pytester"]
