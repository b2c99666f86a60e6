// Package agent is the machine side of fleetd: `fleetd enroll`, the first action of a Workflow
// in HookOS (docs/design.md §1 step 3, §4), and `fleetd boot-check`, the running node's hourly check
// (docs/design.md §5; BootCheck, docs/boot-checks.md).
//
// Enroll opens the TPM (tpmconn: /dev/tpmrm0 or a swtpm), runs the two round trips of package
// api against fleetd, and writes the LDevID, the LAK and the disk authorization into the
// Workflow directory (files.go, README.md). Its error maps to the exit code (ExitCode):
//
//	0 enrolled, the files are written
//	1 another local failure (writing the workflow directory, reading sysfs)
//	2 usage: the flags or environment are wrong
//	3 fleetd refused the machine (4xx): its code and message say why
//	4 fleetd unreachable or failing (connection, timeout, 5xx after retries), or its answer
//	  did not match what the machine sent
//	5 the TPM could not be opened or a TPM command failed
//	6 boot check only: accepted and recorded as drift (the boot differs from the baseline)
//
// Trust assumptions: the agent trusts fleetd's URL and TLS roots as configured by the Template
// and checks fleetd's answer only for consistency with what it sent (its keys, its disks); it
// trusts nothing else it reads from fleetd. Everything it sends is evidence fleetd verifies.
package agent
