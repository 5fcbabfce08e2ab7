// Command cainjector runs cert-manager's own CA injector (github.com/cert-manager/cert-manager v1.21.2,
// pkg/controller/cainjector) for the local real node (controlplane/certmanager.py).
//
// This main is ours, not cert-manager's: cert-manager's cmd/cainjector is a module of its own that the Go
// module proxy does not serve, so it cannot be built from the proxy. The injectors are cert-manager's,
// unchanged, registered by its RegisterAllInjectors on a controller-runtime manager made here: the CA of
// the Secret a Certificate names (annotation `cert-manager.io/inject-ca-from`) or of a Secret
// (`cert-manager.io/inject-ca-from-secret`) goes into the caBundle of Mutating- and
// ValidatingWebhookConfigurations. APIService and CustomResourceDefinition injection is not enabled
// (nothing here needs it). In-cluster configuration (the Pod's ServiceAccount), a single replica without
// leader election, no metrics or health servers, logs to stderr (klog, `--v`), exit 1 on an error.
package main

import (
	"flag"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"
)

func main() {
	// klog's flags only (`--v=2`, as the chart passes): nothing else is configurable.
	klog.InitFlags(nil)
	flag.Parse()
	logf.InitLogs()
	if err := run(); err != nil {
		klog.ErrorS(err, "cert-manager cainjector exiting")
		klog.Flush()
		os.Exit(1)
	}
}

func run() error {
	ctrl.SetLogger(klog.NewKlogr())
	config, err := rest.InClusterConfig()
	if err != nil {
		return fmt.Errorf("in-cluster configuration: %w", err)
	}
	// The injectors apply the caBundle with a field manager derived from the user agent
	// (`cert-manager-cainjector`, as upstream's).
	config = util.RestConfigWithUserAgent(config, "cainjector")

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := cmapi.AddToScheme(scheme); err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	mgr, err := ctrl.NewManager(config, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		// The injectors watch Secrets' metadata only and read a Secret's data when they need it:
		// the manager's client must not cache whole Secrets (RegisterAllInjectors relies on this).
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
		},
	}); err != nil {
		return fmt.Errorf("registering the injectors: %w", err)
	}
	return mgr.Start(ctx)
}
