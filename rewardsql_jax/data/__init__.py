from rewardsql_jax.data.bird import load_bird, read_bird_descriptions
from rewardsql_jax.data.builtin import make_builtin_benchmark, train_bpe_tokenizer
from rewardsql_jax.data.examples import Benchmark, Example
from rewardsql_jax.data.grain_pipelines import (
    PipelineConfig,
    PromptBatch,
    padding_fraction,
    preference_dataset,
    prm_dataset,
    prompt_dataset,
    sft_dataset,
)
from rewardsql_jax.data.layout import MissingDatabaseError
from rewardsql_jax.data.prompts import plain_prompt, reward_sql_prompt
from rewardsql_jax.data.schema import DbSchema, MSchemaOptions, m_schema, read_db_schema, render_m_schema
from rewardsql_jax.data.spider import load_spider, load_spider_tables
from rewardsql_jax.data.spider_hardness import approx_spider_hardness, spider_hardness
from rewardsql_jax.data.tokenizer import encode_prompts, format_prompt, load_tokenizer
