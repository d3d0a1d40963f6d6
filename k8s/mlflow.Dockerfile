# The MLflow server image the manifests name (ghcr.io/opteval/mlflow:3.17.0-postgres):
# the official image plus its PostgreSQL driver, installed once at build time rather than
# by `pip install` at every start.
#   docker build -f k8s/mlflow.Dockerfile -t ghcr.io/opteval/mlflow:3.17.0-postgres k8s
FROM ghcr.io/mlflow/mlflow:v3.17.0
RUN pip install --no-cache-dir "psycopg2-binary>=2.9" && useradd --uid 1000 --create-home mlflow
USER 1000
ENTRYPOINT ["mlflow"]
