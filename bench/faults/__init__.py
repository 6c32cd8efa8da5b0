"""The fault drills' own pieces: a checker that shares no code with the services."""
