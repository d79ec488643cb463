package postgres

// TxAttempts exposes txAttempts to the external tests.
const TxAttempts = txAttempts
