"""The jobs: each a function over a session and settings that reads like its data flow."""
