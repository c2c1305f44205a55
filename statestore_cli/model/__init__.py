"""Plain values every layer shares: scopes, entries, retention and timestamps."""
