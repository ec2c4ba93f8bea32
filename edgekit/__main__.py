"""`python -m edgekit …`: the same CLI as the `edgekit` command."""

from edgekit.cli.main import main

if __name__ == "__main__":
    main()
