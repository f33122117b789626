"""What every layer shares: errors, atomic file I/O, host facts and the options several command
groups take. Imports nothing else of palkit's."""
