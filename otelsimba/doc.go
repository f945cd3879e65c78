// Package otelsimba will turn Simba's session and term events into
// OpenTelemetry traces (one span per term), span events and metrics. Not
// built yet.
package otelsimba
