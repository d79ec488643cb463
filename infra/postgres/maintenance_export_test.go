package postgres

// DedupLockKey exposes the maintenance advisory lock key to the external
// tests, which hold it to play another process.
const DedupLockKey = dedupLockKey

// UUIDV7Floor exposes uuidV7Floor to the external tests.
var UUIDV7Floor = uuidV7Floor
