"""A fleet of real worker processes on the emulators, its scenarios and their analysis."""
