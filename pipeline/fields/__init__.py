"""Pure field parsers and checks shared by every backend and by validation."""
