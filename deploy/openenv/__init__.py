"""medgym's OpenEnv package: the server is `medgym env serve` (server/app.py launches it); clients use OpenEnv's
GenericEnvClient against the Space's URL."""
