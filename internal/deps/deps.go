// Package deps pins the modules the project builds on while the packages that use them are written.
package deps

import (
	_ "github.com/google/go-attestation/attest"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/google/go-tpm-tools/client"
	_ "github.com/google/go-tpm-tools/simulator"
	_ "github.com/google/go-tpm/tpm2"
	_ "github.com/gorilla/mux"
	_ "github.com/hashicorp/go-retryablehttp"
	_ "github.com/netbox-community/go-netbox/v4"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/rs/zerolog"
	_ "github.com/siderolabs/talos/pkg/machinery/config/configloader"
	_ "github.com/siderolabs/talos/pkg/machinery/config/generate"
	_ "github.com/tinkerbell/tink/api/v1alpha1"
	_ "go.etcd.io/etcd/server/v3/embed"
	_ "golang.org/x/sync/errgroup"
	_ "k8s.io/apiextensions-apiserver/pkg/apiserver"
	_ "sigs.k8s.io/controller-runtime/pkg/client"
	_ "sigs.k8s.io/yaml"
)
