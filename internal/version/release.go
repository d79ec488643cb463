package version

// Release is this build's release: the version CHANGELOG.md names for the
// commit of main it was built from (a build between two releases carries
// the next one's name). It decides what the build runs beside, so it is a
// constant of the code, not a stamp of the build.
const Release = "1.2.0"

// RunsBeside is the oldest release this one is safe beside, in one
// consumer group and on one database: no double charge, no lost event,
// every transition published once (CHANGELOG.md, "Upgrading"). Releases
// before 1.2.0 announce nothing to the group and record no attempt of a
// release that preceded the fence, so 1.2.0 runs beside itself only.
const RunsBeside = "1.2.0"
