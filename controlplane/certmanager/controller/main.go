// Command controller runs cert-manager's own controllers (github.com/cert-manager/cert-manager v1.21.2,
// pkg/controller/...) for the local real node (controlplane/certmanager.py).
//
// This main is ours, not cert-manager's: cert-manager's cmd/controller is a module of its own that the Go
// module proxy does not serve, so it cannot be built from the proxy. The controllers, their informers,
// clients and the issuers are cert-manager's, unchanged; this file only wires them up: the Certificate
// controllers, CertificateRequest approval and signing by the CA and SelfSigned issuers, and the Issuer
// and ClusterIssuer controllers. ACME, Vault, Venafi, the CertificateSigningRequest signers and the
// ingress/gateway shims are left out (not imported, so not built). In-cluster configuration (the Pod's
// ServiceAccount), a single replica without leader election, logs to stderr (klog, `--v`), exit 1 on an
// error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	crapprover "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	// The issuer implementations the Issuer controllers can check: each registers itself in init().
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// The controllers run, by the names they register under (each package's init() registers its
// constructor with controllerpkg.Register; importing the package is what makes it Known()).
var controllers = []string{
	issuers.ControllerName,
	clusterissuers.ControllerName,
	crapprover.ControllerName,
	crca.CRControllerName,
	crselfsigned.CRControllerName,
	trigger.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	issuing.ControllerName,
	readiness.ControllerName,
	revisionmanager.ControllerName,
}

// cert-manager's defaults for what ContextOptions holds (internal/apis/config/controller/v1alpha1/
// defaults.go, which another module cannot import), but the cluster resource namespace: the Pod's own,
// as the Helm chart passes it.
const (
	workers             = 5
	apiQPS              = 20
	apiBurst            = 50
	minimumBackoff      = time.Hour
	maximumBackoff      = 32 * time.Hour
	namespaceEnvVarName = "POD_NAMESPACE"
)

var copiedAnnotationPrefixes = []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"}

func main() {
	// klog's flags only (`--v=2`, as the chart passes): nothing else is configurable.
	klog.InitFlags(nil)
	flag.Parse()
	logf.InitLogs()
	if err := run(); err != nil {
		klog.ErrorS(err, "cert-manager controller exiting")
		klog.Flush()
		os.Exit(1)
	}
}

func run() error {
	namespace := os.Getenv(namespaceEnvVarName)
	if namespace == "" {
		return errors.New(namespaceEnvVarName + " is not set (the Deployment sets it to the Pod's namespace)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, logf.Log)

	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		KubernetesAPIQPS:   apiQPS,
		KubernetesAPIBurst: apiBurst,
		IssuerOptions: controllerpkg.IssuerOptions{
			ClusterResourceNamespace:        namespace,
			ClusterIssuerAmbientCredentials: true,
		},
		CertificateOptions: controllerpkg.CertificateOptions{
			CopiedAnnotationPrefixes:                 copiedAnnotationPrefixes,
			CertificateRequestMinimumBackoffDuration: minimumBackoff,
			CertificateRequestMaximumBackoffDuration: maximumBackoff,
		},
	})
	if err != nil {
		return fmt.Errorf("building the controller context: %w", err)
	}
	// Every Context the factory builds shares its informer factories: this one starts them.
	shared, err := factory.Build()
	if err != nil {
		return fmt.Errorf("building the controller context: %w", err)
	}

	group, ctx := errgroup.WithContext(ctx)
	for _, name := range controllers {
		construct, ok := controllerpkg.Known()[name]
		if !ok {
			return fmt.Errorf("controller %q is not registered", name)
		}
		// Constructing a controller registers the informers it needs with the shared factories.
		controller, err := construct(factory)
		if err != nil {
			return fmt.Errorf("constructing controller %q: %w", name, err)
		}
		klog.InfoS("starting controller", "name", name)
		group.Go(func() error {
			if err := controller.Run(workers, ctx); err != nil {
				return fmt.Errorf("controller %q: %w", name, err)
			}
			return nil
		})
	}
	// Started once every controller has asked for its informers (a factory starts those it has).
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.SharedInformerFactory.Start(ctx.Done())
	return group.Wait()
}
