// Command talos-meta reads a Talos disk's META the way Talos v1.11.5 does, with Talos's own code,
// so that fleetd's tests can hold fleetd's META writer (the agent's `fleetd talos-meta` step)
// against the reader a Talos node boots with. It is not built in this directory: scripts/tools.sh
// copies it into a copy of the github.com/siderolabs/talos module, under internal/pkg/meta/,
// the only place Go lets a program import Talos's internal ADV package, and builds it there.
//
//	talos-meta DISK-IMAGE
//	talos-meta DISK-IMAGE TAG=VALUE...
//
// It finds the META partition with the probe Talos's volume manager runs (go-blockdevice's
// blkid; the partition labelled META, unformatted or holding Talos's META, of 1 MiB), reads it
// as Talos's META loader does (the first copy of the ADV that checks, else the second), then
// reads each copy on its own; it also loads the older syslinux ADV at the partition's end, as
// Talos's loader does. It prints one JSON object: the partition's offset and size, the
// tags of what Talos loads (tag number to value), whether each copy checked, and the tag
// Talos's machinery names DownloadURLCode. It exits 1 when the disk has no such partition or
// the loader fails. Given TAG=VALUE arguments (TAG a number, 0x for hex), it first sets those
// keys in META as Talos's installer does (the loaded ADV, SetTag, both copies written at the
// partition's start), so that a test can seed a META with Talos's own writer.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/siderolabs/go-blockdevice/v2/blkid"
	metaconst "github.com/siderolabs/talos/pkg/machinery/meta"

	"github.com/siderolabs/talos/internal/pkg/meta/internal/adv/syslinux"
	"github.com/siderolabs/talos/internal/pkg/meta/internal/adv/talos"
)

type report struct {
	Offset          uint64            `json:"offset"`
	Size            uint64            `json:"size"`
	Tags            map[string]string `json:"tags"`
	Copy1OK         bool              `json:"copy1_ok"`
	Copy2OK         bool              `json:"copy2_ok"`
	Copy1Error      string            `json:"copy1_error,omitempty"`
	Copy2Error      string            `json:"copy2_error,omitempty"`
	LoadWarning     string            `json:"load_warning,omitempty"`
	DownloadURLCode int               `json:"download_url_code_tag"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: talos-meta DISK-IMAGE [TAG=VALUE...]")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "talos-meta:", err)
		os.Exit(1)
	}
}

func run(path string, sets []string) error {
	info, err := blkid.ProbePath(path, blkid.WithSectorSize(512), blkid.WithSkipLocking(true))
	if err != nil {
		return fmt.Errorf("probe %s: %w", path, err)
	}
	// Talos's volume locator for META (internal/app/machined/pkg/controllers/block/volume_config.go):
	// volume.partition_label == 'META' && volume.name in ['', 'talosmeta'] && volume.size == 1048576u
	var part *blkid.NestedProbeResult
	for i := range info.Parts {
		p := &info.Parts[i]
		if p.PartitionLabel == nil || *p.PartitionLabel != "META" {
			continue
		}
		if (p.Name == "" || p.Name == "talosmeta") && p.PartitionSize == 1048576 {
			part = p
			break
		}
	}
	if part == nil {
		return fmt.Errorf("%s has no partition Talos reads as META (label META, unformatted or talosmeta, 1 MiB)", path)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	sec := io.NewSectionReader(f, int64(part.PartitionOffset), int64(part.PartitionSize))
	if len(sets) > 0 {
		if err := set(f, sec, int64(part.PartitionOffset), sets); err != nil {
			return err
		}
	}

	r := report{Offset: part.PartitionOffset, Size: part.PartitionSize, Tags: map[string]string{},
		DownloadURLCode: metaconst.DownloadURLCode}
	// As internal/pkg/meta/meta.go Reload: an ADV returned with an error is a missing ADV, loaded empty.
	adv, err := talos.NewADV(sec)
	if adv == nil && err != nil {
		return fmt.Errorf("failed to load Talos adv: %w", err)
	}
	if err != nil {
		r.LoadWarning = err.Error()
	}
	// Reload then loads the older syslinux ADV from the partition's end, which must read too.
	if _, err := syslinux.NewADV(sec); err != nil {
		return fmt.Errorf("failed to load syslinux adv: %w", err)
	}
	for _, t := range adv.ListTags() {
		v, _ := adv.ReadTag(t)
		r.Tags[strconv.Itoa(int(t))] = v
	}
	for i, ok := range []*bool{&r.Copy1OK, &r.Copy2OK} {
		buf := make([]byte, talos.Length)
		if _, err := sec.ReadAt(buf, int64(i*talos.Length)); err != nil {
			return fmt.Errorf("read copy %d: %w", i+1, err)
		}
		one, _ := talos.NewADV(nil)
		if err := one.Unmarshal(buf); err != nil {
			if i == 0 {
				r.Copy1Error = err.Error()
			} else {
				r.Copy2Error = err.Error()
			}
			continue
		}
		*ok = true
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// set writes the keys into META with Talos's ADV: loaded as Reload loads it, SetTag, Bytes.
func set(f *os.File, sec *io.SectionReader, offset int64, sets []string) error {
	adv, err := talos.NewADV(sec)
	if adv == nil && err != nil {
		return fmt.Errorf("failed to load Talos adv: %w", err)
	}
	for _, kv := range sets {
		k, v, ok := strings.Cut(kv, "=")
		tag, err := strconv.ParseUint(k, 0, 8)
		if !ok || err != nil {
			return fmt.Errorf("%q is not TAG=VALUE with a tag of 0 to 255", kv)
		}
		if !adv.SetTag(uint8(tag), v) {
			return fmt.Errorf("META has no room for tag %d", tag)
		}
	}
	b, err := adv.Bytes()
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(b, offset); err != nil {
		return err
	}
	return f.Sync()
}
