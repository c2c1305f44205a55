"""The operations: each command's behaviour, as public functions that take the settings first."""
