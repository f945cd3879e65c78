// Package group will hold partition groups: members of a group share N
// partitions, each owned by exactly one live member under its own fenced
// lease, assigned fairly and stickily. Not built yet.
package group
